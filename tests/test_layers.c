/* Layers through the public API: nn.MultiheadAttention rebuilt from independent public ops
 * (attn_linear + attn_sdpa) must agree; parameter names follow PyTorch's state_dict; every
 * layer entry point refuses bad input with a status and a message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void fill_params(attn_ctx *ctx, attn_module *m, uint64_t seed) {
    size_t n = attn_module_param_count(m);
    for (size_t i = 0; i < n; i++) {
        attn_tensor t;
        attn_module_param_at(m, i, NULL, &t);
        tu_fill(t.data, (size_t)attn_tensor_numel(&t), seed + i, -0.5f, 0.5f);
    }
    (void)ctx;
}

/* MHA = in-projection (attn_linear on slices of in_proj_weight), attn_sdpa on head views,
 * out-projection; with a key padding mask turned into an additive [B,1,1,S] mask. */
static void mha_matches_composition(attn_ctx *ctx) {
    const int64_t B = 2, L = 5, S = 7, E = 12, H = 3, D = E / H;
    attn_module *m;
    attn_mha_config cfg = attn_mha_defaults(E, H);
    TU_STATUS(attn_mha_create(ctx, &cfg, &m), ATTN_OK, ctx);
    fill_params(ctx, m, 11);
    float *q = malloc(4 * B * L * E), *kv = malloc(4 * B * S * E), *out = malloc(4 * B * L * E),
          *w = malloc(4 * B * H * L * S);
    tu_fill(q, (size_t)(B * L * E), 1, -1, 1);
    tu_fill(kv, (size_t)(B * S * E), 2, -1, 1);
    unsigned char kpm[2 * 7] = {0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1};
    int64_t ks[2] = {B, S};
    attn_mask K = {ATTN_MASK_BLOCK, attn_tensor_make(kpm, ATTN_BOOL, 2, ks)};
    attn_tensor Q = attn_view3(q, B, L, E), KV = attn_view3(kv, B, S, E), O = attn_view3(out, B, L, E),
                W = attn_view4(w, B, H, L, S);
    attn_mha_options opt = {1, 0, 0};
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &KV, &KV, &K, NULL, &opt, NULL, &O, &W), ATTN_OK, ctx);

    attn_tensor ipw, ipb, opw, opb;
    attn_module_param(ctx, m, "in_proj_weight", &ipw);
    attn_module_param(ctx, m, "in_proj_bias", &ipb);
    attn_module_param(ctx, m, "out_proj.weight", &opw);
    attn_module_param(ctx, m, "out_proj.bias", &opb);
    float *qp = malloc(4 * B * L * E), *kp = malloc(4 * B * S * E), *vp = malloc(4 * B * S * E),
          *ao = malloc(4 * B * L * E), *ref = malloc(4 * B * L * E), *rw = malloc(4 * B * H * L * S);
    float *wp = ipw.data, *bp = ipb.data;
    attn_tensor Wq = attn_view2(wp, E, E), Wk = attn_view2(wp + E * E, E, E),
                Wv = attn_view2(wp + 2 * E * E, E, E), bq = attn_view1(bp, E), bk = attn_view1(bp + E, E),
                bv = attn_view1(bp + 2 * E, E);
    attn_tensor QP = attn_view3(qp, B, L, E), KP = attn_view3(kp, B, S, E), VP = attn_view3(vp, B, S, E);
    TU_STATUS(attn_linear(ctx, &Q, &Wq, &bq, &QP), ATTN_OK, ctx);
    TU_STATUS(attn_linear(ctx, &KV, &Wk, &bk, &KP), ATTN_OK, ctx);
    TU_STATUS(attn_linear(ctx, &KV, &Wv, &bv, &VP), ATTN_OK, ctx);
    /* [B, L, E] memory seen as [B, H, L, D] */
    attn_tensor q4 = attn_view4(qp, B, H, L, D), k4 = attn_view4(kp, B, H, S, D),
                v4 = attn_view4(vp, B, H, S, D), o4 = attn_view4(ao, B, H, L, D);
    int64_t st_q[4] = {L * E, D, E, 1}, st_k[4] = {S * E, D, E, 1};
    memcpy(q4.stride, st_q, sizeof st_q), memcpy(o4.stride, st_q, sizeof st_q);
    memcpy(k4.stride, st_k, sizeof st_k), memcpy(v4.stride, st_k, sizeof st_k);
    float add[2 * 7];
    for (int i = 0; i < 14; i++) add[i] = kpm[i] ? -INFINITY : 0.0f;
    int64_t as[4] = {B, 1, 1, S};
    attn_mask A = {ATTN_MASK_ADD, attn_tensor_make(add, ATTN_F32, 4, as)};
    attn_tensor RW = attn_view4(rw, B, H, L, S);
    TU_STATUS(attn_sdpa(ctx, &q4, &k4, &v4, &A, NULL, &o4, &RW, NULL), ATTN_OK, ctx);
    attn_tensor AO = attn_view3(ao, B, L, E), REF = attn_view3(ref, B, L, E);
    TU_STATUS(attn_linear(ctx, &AO, &opw, &opb, &REF), ATTN_OK, ctx);
    tu_close("mha out vs linear+sdpa+linear", out, ref, (size_t)(B * L * E), 1e-6);
    tu_close("mha weights vs sdpa weights", w, rw, (size_t)(B * H * L * S), 1e-6);
    free(q), free(kv), free(out), free(w), free(qp), free(kp), free(vp), free(ao), free(ref), free(rw);
    attn_module_free(m);
}

static int has_param(attn_ctx *ctx, attn_module *m, const char *name) {
    attn_tensor t;
    attn_status s = attn_module_param(ctx, m, name, &t);
    attn_ctx_clear_error(ctx);
    return s == ATTN_OK;
}

static void state_dict_names(attn_ctx *ctx) {
    attn_module *m;
    attn_mha_config c = attn_mha_defaults(8, 2);
    c.kdim = 5, c.add_bias_kv = 1;
    TU_STATUS(attn_mha_create(ctx, &c, &m), ATTN_OK, ctx);
    const char *want[] = {"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                          "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"};
    TU_CHECK(attn_module_param_count(m) == 8, "mha param count %zu", attn_module_param_count(m));
    for (size_t i = 0; i < 8; i++) {
        const char *name;
        attn_module_param_at(m, i, &name, NULL);
        TU_CHECK(strcmp(name, want[i]) == 0, "param %zu is %s, expected %s", i, name, want[i]);
    }
    attn_tensor t;
    attn_module_param(ctx, m, "k_proj_weight", &t);
    TU_CHECK(t.ndim == 2 && t.shape[0] == 8 && t.shape[1] == 5, "k_proj_weight shape");
    TU_STATUS(attn_module_param(ctx, m, "in_proj_weight", &t), ATTN_E_NOT_FOUND, ctx);
    attn_module_free(m);

    attn_transformer_config tc = attn_transformer_defaults(8, 2);
    tc.dim_feedforward = 16, tc.num_encoder_layers = 2, tc.num_decoder_layers = 1;
    TU_STATUS(attn_transformer_create(ctx, &tc, &m), ATTN_OK, ctx);
    const char *names[] = {"encoder.layers.0.self_attn.in_proj_weight",
                           "encoder.layers.1.linear2.bias", "encoder.norm.weight",
                           "decoder.layers.0.multihead_attn.out_proj.weight",
                           "decoder.layers.0.norm3.bias", "decoder.norm.bias"};
    for (int i = 0; i < 6; i++) TU_CHECK(has_param(ctx, m, names[i]), "transformer has %s", names[i]);
    /* 2 encoder layers: 4*E*E+4E (attn) + 2*E*F+F+E (ffn) + 4E (norms); decoder layer adds a
     * second attention and norm; plus 2 final norms */
    int64_t E = 8, F = 16, attn = 4 * E * E + 4 * E, ffn = 2 * E * F + F + E;
    int64_t expect = 2 * (attn + ffn + 4 * E) + (2 * attn + ffn + 6 * E) + 4 * E;
    TU_CHECK(attn_module_numel(m) == expect, "transformer numel %lld, expected %lld",
             (long long)attn_module_numel(m), (long long)expect);
    TU_CHECK(strcmp(attn_module_kind(m), "transformer") == 0, "kind");
    attn_module_free(m);
    tc.bias = 0;
    TU_STATUS(attn_encoder_layer_create(ctx, &tc, &m), ATTN_OK, ctx);
    TU_CHECK(!has_param(ctx, m, "norm1.bias") && !has_param(ctx, m, "linear1.bias") &&
                 !has_param(ctx, m, "self_attn.in_proj_bias") && has_param(ctx, m, "norm1.weight"),
             "bias=false removes every bias");
    attn_tensor nw;
    attn_module_param(ctx, m, "norm2.weight", &nw);
    TU_CHECK(((float *)nw.data)[0] == 1.0f, "layer norm weights start at one");
    attn_module_free(m);
}

static void bad_layer_inputs(attn_ctx *ctx) {
    attn_module *m = NULL, *lin = NULL;
    attn_mha_config c = attn_mha_defaults(6, 4);
    TU_STATUS(attn_mha_create(ctx, &c, &m), ATTN_E_SHAPE, ctx); /* 6 % 4 */
    TU_CHECK(m == NULL && strstr(attn_ctx_errmsg(ctx), "divisible"), "heads message: %s",
             attn_ctx_errmsg(ctx));
    c = attn_mha_defaults(8, 2);
    c.dropout = 1.5f;
    TU_STATUS(attn_mha_create(ctx, &c, &m), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_mha_create(ctx, NULL, &m), ATTN_E_INVALID, ctx);
    c = attn_mha_defaults(8, 2);
    TU_STATUS(attn_mha_create(ctx, &c, &m), ATTN_OK, ctx);
    TU_STATUS(attn_linear_create(ctx, 3, 4, 1, &lin), ATTN_OK, ctx);
    float q[2 * 3 * 8] = {0}, o[2 * 3 * 8], w[2 * 3 * 3];
    attn_tensor Q = attn_view3(q, 2, 3, 8), O = attn_view3(o, 2, 3, 8), W = attn_view3(w, 2, 3, 3);
    attn_mha_options opt = {1, 1, 0};
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W), ATTN_OK, ctx);
    TU_STATUS(attn_mha_forward(ctx, lin, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "linear"), "wrong module kind named");
    TU_STATUS(attn_mha_forward(ctx, NULL, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, NULL), ATTN_E_INVALID, ctx);
    attn_tensor Q7 = attn_view3(q, 2, 3, 7);
    TU_STATUS(attn_mha_forward(ctx, m, &Q7, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W), ATTN_E_SHAPE, ctx);
    attn_tensor Kb = attn_view3(q, 1, 3, 8);
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Kb, &Kb, NULL, NULL, &opt, NULL, &O, &W), ATTN_E_SHAPE, ctx);
    unsigned char mb[4 * 4] = {0};
    int64_t s2[2] = {3, 4}, s3[3] = {3, 3, 3}, sk[2] = {2, 4};
    attn_mask bad2 = {ATTN_MASK_BLOCK, attn_tensor_make(mb, ATTN_BOOL, 2, s2)};
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, &bad2, &opt, NULL, &O, &W), ATTN_E_BROADCAST, ctx);
    attn_mask bad3 = {ATTN_MASK_BLOCK, attn_tensor_make(mb, ATTN_BOOL, 3, s3)}; /* needs B*H = 4 */
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, &bad3, &opt, NULL, &O, &W), ATTN_E_BROADCAST, ctx);
    attn_mask badk = {ATTN_MASK_BLOCK, attn_tensor_make(mb, ATTN_BOOL, 2, sk)};
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, &badk, NULL, &opt, NULL, &O, &W), ATTN_E_BROADCAST, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "key_padding_mask"), "kpm named: %s", attn_ctx_errmsg(ctx));
    attn_tensor W4 = attn_view4(w, 2, 2, 3, 3);
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W4), ATTN_E_SHAPE, ctx);
    q[3] = NAN;
    TU_STATUS(attn_mha_forward(ctx, m, &Q, &Q, &Q, NULL, NULL, &opt, NULL, &O, &W), ATTN_E_NONFINITE, ctx);
    q[3] = 0;
    attn_module_free(m);

    /* transformer configs */
    attn_transformer_config tc = attn_transformer_defaults(8, 3);
    TU_STATUS(attn_encoder_layer_create(ctx, &tc, &m), ATTN_E_SHAPE, ctx);
    tc = attn_transformer_defaults(8, 2);
    tc.layer_norm_eps = 0;
    TU_STATUS(attn_decoder_layer_create(ctx, &tc, &m), ATTN_E_INVALID, ctx);
    tc = attn_transformer_defaults(8, 2);
    tc.activation = ATTN_ACT_TANH;
    TU_STATUS(attn_encoder_create(ctx, &tc, 1, &m), ATTN_E_INVALID, ctx);
    tc = attn_transformer_defaults(8, 2);
    tc.num_encoder_layers = 0;
    TU_STATUS(attn_transformer_create(ctx, &tc, &m), ATTN_E_INVALID, ctx);
    tc = attn_transformer_defaults(8, 2);
    tc.dim_feedforward = 16, tc.num_encoder_layers = 1;
    TU_STATUS(attn_gpt_create(ctx, &tc, 10, 4, &m), ATTN_OK, ctx);
    int64_t ids[2 * 5] = {1, 2, 3, 4, 5, 0, 0, 0, 0, 0}, is[2] = {2, 5};
    float logits[2 * 5 * 10];
    attn_tensor I = attn_tensor_make(ids, ATTN_I64, 2, is), Lg = attn_view3(logits, 2, 5, 10);
    TU_STATUS(attn_gpt_forward(ctx, m, &I, NULL, &Lg), ATTN_E_SHAPE, ctx); /* T 5 > 4 */
    is[1] = 4;
    I = attn_tensor_make(ids, ATTN_I64, 2, is);
    attn_tensor Lg4 = attn_view3(logits, 2, 4, 10);
    ids[2] = 10;
    TU_STATUS(attn_gpt_forward(ctx, m, &I, NULL, &Lg4), ATTN_E_INVALID, ctx); /* id 10 >= V */
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "10"), "id named");
    ids[2] = 3;
    TU_STATUS(attn_gpt_forward(ctx, m, &I, NULL, &Lg4), ATTN_OK, ctx);
    attn_module_free(m);

    /* seed heads that do not divide: refused, not rounded (seed 000's "8 dims, 3 heads") */
    attn_seed_attention_config sc = {ATTN_SEED_MULTIHEAD, 3, 8, 0, 0.0f, 3};
    TU_STATUS(attn_seed_attention_create(ctx, &sc, &m), ATTN_E_SHAPE, ctx);
    attn_module_free(lin);
}

/* ATTN_GPT_TIED against an untied GPT holding the same weights with lm_head.weight a copy of
 * tok_emb.weight: the same logits (bit for bit: the same products), and tok_emb's gradient
 * equal to the untied tok_emb + lm_head gradients (summed in another order: 1e-6 relative);
 * no lm_head.weight parameter; unknown flags refused. */
static void gpt_tied_head(attn_ctx *ctx) {
    attn_transformer_config tc = attn_transformer_defaults(8, 2);
    tc.dim_feedforward = 16, tc.num_encoder_layers = 2, tc.norm_first = 1;
    tc.activation = ATTN_ACT_GELU;
    attn_module *t = NULL, *u = NULL;
    TU_STATUS(attn_gpt_create_ex(ctx, &tc, 11, 6, 2u, &t), ATTN_E_INVALID, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "0x2"), "flags named: %s", attn_ctx_errmsg(ctx));
    TU_STATUS(attn_gpt_create_ex(ctx, &tc, 11, 6, ATTN_GPT_TIED, &t), ATTN_OK, ctx);
    TU_STATUS(attn_gpt_create(ctx, &tc, 11, 6, &u), ATTN_OK, ctx);
    if (!t || !u) goto done;
    attn_tensor v;
    TU_STATUS(attn_module_param(ctx, t, "lm_head.weight", &v), ATTN_E_NOT_FOUND, ctx);
    TU_CHECK(attn_module_param_count(t) + 1 == attn_module_param_count(u), "%zu vs %zu params",
             attn_module_param_count(t), attn_module_param_count(u));
    TU_STATUS(attn_module_init(ctx, t, 3), ATTN_OK, ctx);
    for (size_t i = 0; i < attn_module_param_count(t); i++) { /* u takes t's weights */
        const char *name;
        attn_tensor a, b;
        attn_module_param_at(t, i, &name, &a);
        TU_STATUS(attn_module_param(ctx, u, name, &b), ATTN_OK, ctx);
        memcpy(b.data, a.data, sizeof(float) * (size_t)attn_tensor_numel(&a));
    }
    attn_tensor tok, head;
    TU_STATUS(attn_module_param(ctx, t, "tok_emb.weight", &tok), ATTN_OK, ctx);
    TU_STATUS(attn_module_param(ctx, u, "lm_head.weight", &head), ATTN_OK, ctx);
    memcpy(head.data, tok.data, sizeof(float) * 11 * 8);
    TU_STATUS(attn_module_enable_grad(ctx, t), ATTN_OK, ctx);
    TU_STATUS(attn_module_enable_grad(ctx, u), ATTN_OK, ctx);
    int64_t ids[2 * 6] = {1, 4, 9, 10, 0, 3, 7, 7, 2, 5, 8, 6}, is[2] = {2, 6};
    float lt[2 * 6 * 11], lu[2 * 6 * 11], dl[2 * 6 * 11];
    tu_fill(dl, 2 * 6 * 11, 9, -1, 1);
    attn_tensor I = attn_tensor_make(ids, ATTN_I64, 2, is), Lt = attn_view3(lt, 2, 6, 11),
                Lu = attn_view3(lu, 2, 6, 11), DL = attn_view3(dl, 2, 6, 11);
    TU_STATUS(attn_gpt_forward(ctx, t, &I, NULL, &Lt), ATTN_OK, ctx);
    TU_STATUS(attn_gpt_forward(ctx, u, &I, NULL, &Lu), ATTN_OK, ctx);
    TU_CHECK(!memcmp(lt, lu, sizeof lt), "tied logits differ from the untied copy");
    TU_STATUS(attn_gpt_backward(ctx, t, &I, NULL, &DL), ATTN_OK, ctx);
    TU_STATUS(attn_gpt_backward(ctx, u, &I, NULL, &DL), ATTN_OK, ctx);
    attn_tensor gt, gu, gh;
    TU_STATUS(attn_module_grad(ctx, t, "tok_emb.weight", &gt), ATTN_OK, ctx);
    TU_STATUS(attn_module_grad(ctx, u, "tok_emb.weight", &gu), ATTN_OK, ctx);
    TU_STATUS(attn_module_grad(ctx, u, "lm_head.weight", &gh), ATTN_OK, ctx);
    float sum[11 * 8];
    for (int i = 0; i < 11 * 8; i++)
        sum[i] = ((const float *)gu.data)[i] + ((const float *)gh.data)[i];
    tu_close("tied tok_emb gradient", gt.data, sum, 11 * 8, 1e-6);
done:
    attn_module_free(t);
    attn_module_free(u);
}

static void dropout_is_deterministic_and_training_only(attn_ctx *ctx) {
    attn_transformer_config tc = attn_transformer_defaults(8, 2);
    tc.dim_feedforward = 16, tc.dropout = 0.3f;
    attn_module *m;
    TU_STATUS(attn_encoder_layer_create(ctx, &tc, &m), ATTN_OK, ctx);
    fill_params(ctx, m, 5);
    float x[2 * 4 * 8], a[64], b[64], c[64], d[64];
    tu_fill(x, 64, 3, -1, 1);
    attn_tensor X = attn_view3(x, 2, 4, 8), A = attn_view3(a, 2, 4, 8), Bt = attn_view3(b, 2, 4, 8),
                C = attn_view3(c, 2, 4, 8), D = attn_view3(d, 2, 4, 8);
    attn_run tr = {1, 42, 0, 0}, ev = {0, 42, 0, 0}, tr2 = {1, 43, 0, 0};
    TU_STATUS(attn_encoder_layer_forward(ctx, m, &X, NULL, &tr, &A), ATTN_OK, ctx);
    TU_STATUS(attn_encoder_layer_forward(ctx, m, &X, NULL, &tr, &Bt), ATTN_OK, ctx);
    TU_STATUS(attn_encoder_layer_forward(ctx, m, &X, NULL, &ev, &C), ATTN_OK, ctx);
    TU_STATUS(attn_encoder_layer_forward(ctx, m, &X, NULL, &tr2, &D), ATTN_OK, ctx);
    TU_CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same output");
    TU_CHECK(memcmp(a, c, sizeof a) != 0, "training differs from eval");
    TU_CHECK(memcmp(a, d, sizeof a) != 0, "different seed differs");
    attn_module_free(m);
}

/* attn_transformer_masks: a NULL pointer is a struct of NULLs; each function reads only its
 * members (the others, even malformed, are ignored); nn.Transformer reads src_is_causal, which
 * is the same as an explicit causal src_mask. */
static void transformer_masks_struct(attn_ctx *ctx) {
    enum { B = 2, S = 5, T = 4, E = 8 };
    attn_transformer_config tc = attn_transformer_defaults(E, 2);
    tc.dim_feedforward = 16, tc.dropout = 0.0f;
    tc.num_encoder_layers = 1, tc.num_decoder_layers = 1;
    attn_module *tf = NULL, *enc = NULL, *dec = NULL;
    TU_STATUS(attn_transformer_create(ctx, &tc, &tf), ATTN_OK, ctx);
    TU_STATUS(attn_encoder_layer_create(ctx, &tc, &enc), ATTN_OK, ctx);
    TU_STATUS(attn_decoder_layer_create(ctx, &tc, &dec), ATTN_OK, ctx);
    if (!tf || !enc || !dec) goto done;
    fill_params(ctx, tf, 21);
    fill_params(ctx, enc, 22);
    fill_params(ctx, dec, 23);
    float src[B * S * E], tgt[B * T * E], o1[B * T * E], o2[B * T * E], o3[B * T * E];
    float e1[B * S * E], e2[B * S * E];
    tu_fill(src, B * S * E, 4, -1, 1);
    tu_fill(tgt, B * T * E, 5, -1, 1);
    attn_tensor Src = attn_view3(src, B, S, E), Tgt = attn_view3(tgt, B, T, E);
    attn_tensor O1 = attn_view3(o1, B, T, E), O2 = attn_view3(o2, B, T, E),
                O3 = attn_view3(o3, B, T, E);
    attn_tensor E1 = attn_view3(e1, B, S, E), E2 = attn_view3(e2, B, S, E);
    attn_transformer_masks none = {0};
    TU_STATUS(attn_transformer_forward(ctx, tf, &Src, &Tgt, NULL, NULL, &O1), ATTN_OK, ctx);
    TU_STATUS(attn_transformer_forward(ctx, tf, &Src, &Tgt, &none, NULL, &O2), ATTN_OK, ctx);
    TU_CHECK(memcmp(o1, o2, sizeof o1) == 0, "NULL masks and a struct of NULLs agree");

    unsigned char causal[S * S];
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) causal[i * S + j] = j > i;
    int64_t cs[2] = {S, S};
    attn_mask cm = {ATTN_MASK_BLOCK, attn_tensor_make(causal, ATTN_BOOL, 2, cs)};
    attn_transformer_masks flag = {0}, explicit_mask = {0};
    flag.src_is_causal = 1;
    explicit_mask.src_mask = &cm;
    TU_STATUS(attn_transformer_forward(ctx, tf, &Src, &Tgt, &flag, NULL, &O2), ATTN_OK, ctx);
    TU_STATUS(attn_transformer_forward(ctx, tf, &Src, &Tgt, &explicit_mask, NULL, &O3), ATTN_OK,
              ctx);
    tu_close("src_is_causal = causal src_mask", o2, o3, B * T * E, 1e-5);
    TU_CHECK(memcmp(o1, o2, sizeof o1) != 0, "src_is_causal changes nn.Transformer's output");

    /* members a function does not read are ignored, even malformed ones */
    unsigned char junk[3];
    int64_t js[1] = {3};
    attn_mask bad = {ATTN_MASK_BLOCK, attn_tensor_make(junk, ATTN_BOOL, 1, js)};
    attn_transformer_masks dec_only = {0}, src_only = {0};
    dec_only.tgt_mask = dec_only.memory_mask = &bad;
    dec_only.tgt_key_padding_mask = dec_only.memory_key_padding_mask = &bad;
    dec_only.tgt_is_causal = 1;
    src_only.src_mask = src_only.src_key_padding_mask = &bad;
    src_only.src_is_causal = 1;
    TU_STATUS(attn_encoder_layer_forward(ctx, enc, &Src, NULL, NULL, &E1), ATTN_OK, ctx);
    TU_STATUS(attn_encoder_layer_forward(ctx, enc, &Src, &dec_only, NULL, &E2), ATTN_OK, ctx);
    TU_CHECK(memcmp(e1, e2, sizeof e1) == 0, "the encoder layer ignores tgt_* and memory_*");
    TU_STATUS(attn_decoder_layer_forward(ctx, dec, &Tgt, &Src, NULL, NULL, &O1), ATTN_OK, ctx);
    TU_STATUS(attn_decoder_layer_forward(ctx, dec, &Tgt, &Src, &src_only, NULL, &O2), ATTN_OK,
              ctx);
    TU_CHECK(memcmp(o1, o2, sizeof o1) == 0, "the decoder layer ignores src_*");
    /* and a member it reads is checked */
    TU_STATUS(attn_encoder_layer_forward(ctx, enc, &Src, &src_only, NULL, &E2), ATTN_E_SHAPE,
              ctx);
done:
    attn_module_free(tf);
    attn_module_free(enc);
    attn_module_free(dec);
}

int main(void) {
    attn_ctx *ctx;
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    mha_matches_composition(ctx);
    state_dict_names(ctx);
    bad_layer_inputs(ctx);
    dropout_is_deterministic_and_training_only(ctx);
    gpt_tied_head(ctx);
    transformer_masks_struct(ctx);
    attn_ctx_free(ctx);
    return tu_finish("test_layers");
}
