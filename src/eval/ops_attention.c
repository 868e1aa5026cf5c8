/* attn eval ops: attention (SDPA, multi-head attention, the seed lessons' modules,
 * general and additive attention).  Each op with its attribute and input lists; see eval.h. */
#include <math.h>
#include <string.h>

#include "eval.h"

/* ---- sdpa ------------------------------------------------------------------------------- */

static const ev_attr A_SDPA[] = {
    {"is_causal", 'b', "false", NULL},
    {"scale", 'f', EV_OPT, NULL},
    {"enable_gqa", 'b', "false", NULL},
    {"dropout_p", 'f', "0", NULL},
    {"seed", 'i', "0", NULL},
    {"causal_alignment", 'e', "top_left", "top_left|bottom_right"},
    {"need_weights", 'b', "false", NULL},
    {"return_lse", 'b', "false", NULL},
    {"window_left", 'i', "-1", NULL},
    {"window_right", 'i', "-1", NULL},
    {"softcap", 'f', "0", NULL},
    EV_END};
static const char *const I_SDPA[] = {"query", "key", "value", "attn_mask", "alibi_slopes", NULL};

static attn_status op_sdpa(ev *e) {
    attn_tensor q, k, v, o, w, lse;
    attn_mask mask;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "query", 1, 3, 4, &q));
    ATTN_TRY(ev_input(e, "key", 1, 3, 4, &k));
    ATTN_TRY(ev_input(e, "value", 1, 3, 4, &v));
    ATTN_FAIL_IF(k.ndim != q.ndim || v.ndim != q.ndim, e->ctx, ATTN_E_SHAPE,
                 "query, key and value must have the same number of dimensions (%d, %d, %d)",
                 q.ndim, k.ndim, v.ndim);
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 4, &mask));
    attn_tensor slopes;
    ATTN_TRY(ev_input(e, "alibi_slopes", 0, 1, 1, &slopes));
    ATTN_TRY(ev_ready(e));
    /* the file's shapes, for the gradients */
    attn_tensor q0 = q, k0 = k, v0 = v, m0 = mask.t;
    int three = q.ndim == 3;
    if (three) {
        /* [B, L, D] is one head: view as [B, 1, L, D] */
        int64_t qs[4] = {q.shape[0], 1, q.shape[1], q.shape[2]};
        int64_t ks[4] = {k.shape[0], 1, k.shape[1], k.shape[2]};
        int64_t vs[4] = {v.shape[0], 1, v.shape[1], v.shape[2]};
        q = ev_reshape(&q, 4, qs);
        k = ev_reshape(&k, 4, ks);
        v = ev_reshape(&v, 4, vs);
        if (mask.kind != ATTN_MASK_NONE && mask.t.ndim == 3) {
            /* a 3-D mask [B, L, S] lines up with the batch, not with the inserted head axis */
            int64_t ms[4] = {mask.t.shape[0], 1, mask.t.shape[1], mask.t.shape[2]};
            mask.t = ev_reshape(&mask.t, 4, ms);
        }
    }
    int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], D = q.shape[3];
    int64_t Hkv = k.shape[1], S = k.shape[2], Dv = v.shape[3];
    ATTN_FAIL_IF(!ev_b(e, "enable_gqa") && H != Hkv, e->ctx, ATTN_E_SHAPE,
                 "query %s has %lld heads but key %s has %lld; set enable_gqa = true for "
                 "grouped-query attention", attn__shape_str(&q, s1, sizeof s1), (long long)H,
                 attn__shape_str(&k, s2, sizeof s2), (long long)Hkv);
    attn_sdpa_options opt = attn_sdpa_defaults();
    if (ev_b(e, "is_causal"))
        opt.causal = ev_e(e, "causal_alignment") ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
    if (ev_has(e, "scale")) {
        double sc = ev_f(e, "scale");
        if (sc == 0.0) {
            /* attn_sdpa reads scale 0 as "default"; PyTorch's scale=0 makes every score 0,
             * which zeroing the query (our own copy) reproduces exactly */
            memset(q.data, 0, (size_t)attn_tensor_numel(&q) * sizeof(float));
        } else {
            ATTN_FAIL_IF(fabs(sc) > 3.4e38, e->ctx, ATTN_E_INVALID,
                         "attribute 'scale' (%g) is out of the float range", sc);
            opt.scale = (float)sc;
        }
    }
    opt.dropout_p = (float)ev_f(e, "dropout_p");
    ATTN_FAIL_IF(ev_i(e, "seed") < 0, e->ctx, ATTN_E_INVALID,
                 "attribute 'seed' must be >= 0, got %lld", (long long)ev_i(e, "seed"));
    opt.seed = (uint64_t)ev_i(e, "seed");
    opt.window_left = ev_i(e, "window_left");
    opt.window_right = ev_i(e, "window_right");
    opt.window = opt.window_left >= 0 || opt.window_right >= 0; /* -1 and -1: none */
    ATTN_FAIL_IF(fabs(ev_f(e, "softcap")) > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'softcap' (%g) is out of the float range", ev_f(e, "softcap"));
    opt.softcap = (float)ev_f(e, "softcap"); /* attn_sdpa refuses a negative one */
    if (slopes.data) {
        ATTN_FAIL_IF(slopes.shape[0] != H, e->ctx, ATTN_E_SHAPE,
                     "tensor 'alibi_slopes' must have one slope per query head (%lld), got %lld",
                     (long long)H, (long long)slopes.shape[0]);
        opt.alibi_slopes = slopes.data;
    }
    int64_t os[4] = {B, H, L, Dv}, ws[4] = {B, H, L, S};
    ATTN_TRY(ev_new(e, "out", 4, os, &o));
    memset(&w, 0, sizeof w);
    memset(&lse, 0, sizeof lse);
    if (ev_b(e, "need_weights")) ATTN_TRY(ev_new(e, "attn_weights", 4, ws, &w));
    if (ev_b(e, "return_lse")) ATTN_TRY(ev_new(e, "lse", 3, ws, &lse));
    ATTN_TRY(attn_sdpa(e->ctx, &q, &k, &v, mask.kind ? &mask : NULL, &opt, &o,
                       w.data ? &w : NULL, lse.data ? &lse : NULL));
    (void)D;
    int64_t o3[3] = {B, L, Dv};
    if (three) {
        int64_t w3[3] = {B, L, S}, l2[2] = {B, L};
        ATTN_TRY(ev_write_as(e, "out", &o, 3, o3));
        if (w.data) ATTN_TRY(ev_write_as(e, "attn_weights", &w, 3, w3));
        if (lse.data) ATTN_TRY(ev_write_as(e, "lse", &lse, 2, l2));
    } else {
        ATTN_TRY(ev_write(e, "out", &o));
        if (w.data) ATTN_TRY(ev_write(e, "attn_weights", &w));
        if (lse.data) ATTN_TRY(ev_write(e, "lse", &lse));
    }
    if (!e->bwd) return ATTN_OK;
    /* backward: the gradients of query, key, value and of a float attn_mask (a bool mask is
     * not differentiable) */
    attn_tensor go, dq, dk, dv, dm;
    ATTN_TRY(ev_grad_out(e, three ? 3 : 4, three ? o3 : os, &go));
    go = ev_reshape(&go, 4, os);
    ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.key", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.value", &v, &dv));
    memset(&dm, 0, sizeof dm);
    if (mask.kind == ATTN_MASK_ADD) ATTN_TRY(ev_grad_like(e, "grad.attn_mask", &mask.t, &dm));
    ATTN_TRY(attn_sdpa_backward(e->ctx, &q, &k, &v, mask.kind ? &mask : NULL, &opt, &go, &dq,
                                &dk, &dv, dm.data ? &dm : NULL));
    /* scale 0 ran as a zeroed query with the default scale: PyTorch's scores q k^T * 0 give
     * dquery = 0 (dkey is already 0: it is proportional to the zeroed query) */
    if (ev_has(e, "scale") && ev_f(e, "scale") == 0.0)
        memset(dq.data, 0, (size_t)attn_tensor_numel(&dq) * sizeof(float));
    ATTN_TRY(ev_write_grad_as(e, "query", &dq, q0.ndim, q0.shape));
    ATTN_TRY(ev_write_grad_as(e, "key", &dk, k0.ndim, k0.shape));
    ATTN_TRY(ev_write_grad_as(e, "value", &dv, v0.ndim, v0.shape));
    if (dm.data) ATTN_TRY(ev_write_grad_as(e, "attn_mask", &dm, m0.ndim, m0.shape));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- multihead_attention --------------------------------------------------------------- */

static const ev_attr A_MHA[] = {
    {"embed_dim", 'i', EV_REQ, NULL},
    {"num_heads", 'i', EV_REQ, NULL},
    {"dropout", 'f', "0", NULL},
    {"bias", 'b', "true", NULL},
    {"add_bias_kv", 'b', "false", NULL},
    {"add_zero_attn", 'b', "false", NULL},
    {"kdim", 'i', EV_OPT, NULL},
    {"vdim", 'i', EV_OPT, NULL},
    {"need_weights", 'b', "true", NULL},
    {"average_attn_weights", 'b', "true", NULL},
    {"is_causal", 'b', "false", NULL},
    {"batch_first", 'b', "true", NULL},
    EV_END};
static const char *const I_MHA[] = {"query", "key", "value", "key_padding_mask", "attn_mask",
                                    NULL};

static attn_status op_multihead_attention(ev *e) {
    int64_t E = ev_i(e, "embed_dim"), H = ev_i(e, "num_heads");
    ATTN_TRY(ev_heads_divide(e, "embed_dim", E, "num_heads", H));
    ATTN_FAIL_IF(!ev_b(e, "batch_first"), e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'batch_first' = false is not supported: attn layers are batch-first");
    attn_mha_config cfg = attn_mha_defaults(E, H);
    if (ev_has(e, "kdim")) cfg.kdim = ev_i(e, "kdim");
    if (ev_has(e, "vdim")) cfg.vdim = ev_i(e, "vdim");
    ATTN_FAIL_IF((ev_has(e, "kdim") && cfg.kdim <= 0) || (ev_has(e, "vdim") && cfg.vdim <= 0),
                 e->ctx, ATTN_E_INVALID, "attributes 'kdim' and 'vdim' must be positive");
    cfg.bias = ev_b(e, "bias");
    cfg.add_bias_kv = ev_b(e, "add_bias_kv");
    cfg.add_zero_attn = ev_b(e, "add_zero_attn");
    cfg.dropout = (float)ev_f(e, "dropout");
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_mha_create(e->ctx, &cfg, &m), &m, ""));

    attn_tensor q, k, v, o, w;
    attn_mask kpm, am;
    ATTN_TRY(ev_input(e, "query", 1, 2, 3, &q));
    ATTN_TRY(ev_input(e, "key", 1, q.ndim, q.ndim, &k));
    ATTN_TRY(ev_input(e, "value", 1, q.ndim, q.ndim, &v));
    ATTN_TRY(ev_mask(e, "key_padding_mask", ATTN_MASK_BLOCK, q.ndim - 1, &kpm));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_BLOCK, 3, &am));
    ATTN_TRY(ev_hint_needs_mask(e, "is_causal", &am, "attn_mask"));
    ATTN_TRY(ev_ready(e));
    attn_tensor q0 = q, k0 = k, v0 = v; /* the file's shapes, for the gradients */
    int unbatched = q.ndim == 2;
    if (unbatched) {
        /* PyTorch's unbatched form [L, E]: run as a batch of one */
        int64_t qs[3] = {1, q.shape[0], q.shape[1]}, ks[3] = {1, k.shape[0], k.shape[1]},
                vs[3] = {1, v.shape[0], v.shape[1]};
        q = ev_reshape(&q, 3, qs);
        k = ev_reshape(&k, 3, ks);
        v = ev_reshape(&v, 3, vs);
        if (kpm.kind != ATTN_MASK_NONE) {
            int64_t ps[2] = {1, kpm.t.shape[0]};
            kpm.t = ev_reshape(&kpm.t, 2, ps);
        }
    }
    int64_t B = q.shape[0], L = q.shape[1], S = k.shape[1];
    int64_t S2 = S + cfg.add_bias_kv + cfg.add_zero_attn;
    attn_mha_options opt;
    opt.need_weights = ev_b(e, "need_weights");
    opt.average_attn_weights = ev_b(e, "average_attn_weights");
    opt.is_causal = ev_b(e, "is_causal");
    int64_t os[3] = {B, L, E}, wa[3] = {B, L, S2}, wh[4] = {B, H, L, S2};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    memset(&w, 0, sizeof w);
    if (opt.need_weights) {
        if (opt.average_attn_weights)
            ATTN_TRY(ev_new(e, "attn_weights", 3, wa, &w));
        else
            ATTN_TRY(ev_new(e, "attn_weights", 4, wh, &w));
    }
    ATTN_TRY(attn_mha_forward(e->ctx, m, &q, &k, &v, kpm.kind ? &kpm : NULL,
                              am.kind ? &am : NULL, &opt, NULL, &o, w.data ? &w : NULL));
    if (!unbatched) {
        ATTN_TRY(ev_write(e, "out", &o));
        if (w.data) ATTN_TRY(ev_write(e, "attn_weights", &w));
    } else {
        ATTN_TRY(ev_write_as(e, "out", &o, 2, os + 1));
        if (w.data) {
            if (opt.average_attn_weights)
                ATTN_TRY(ev_write_as(e, "attn_weights", &w, 2, wa + 1));
            else
                ATTN_TRY(ev_write_as(e, "attn_weights", &w, 3, wh + 1));
        }
    }
    if (!e->bwd) return ATTN_OK;
    /* query, key and value are separate tensors of the file even when equal: each gets its
     * own gradient */
    attn_tensor go, dq, dk, dv;
    ATTN_TRY(ev_grad_out(e, unbatched ? 2 : 3, unbatched ? os + 1 : os, &go));
    go = ev_reshape(&go, 3, os);
    ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.key", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.value", &v, &dv));
    ATTN_TRY(attn_mha_backward(e->ctx, m, &q, &k, &v, kpm.kind ? &kpm : NULL,
                               am.kind ? &am : NULL, &opt, NULL, &go, &dq, &dk, &dv));
    ATTN_TRY(ev_write_grad_as(e, "query", &dq, q0.ndim, q0.shape));
    ATTN_TRY(ev_write_grad_as(e, "key", &dk, k0.ndim, k0.shape));
    ATTN_TRY(ev_write_grad_as(e, "value", &dv, v0.ndim, v0.shape));
    return ev_write_param_grads(e);
}

/* ---- seed attention modules ------------------------------------------------------------ */

static const ev_attr A_SIMPLE[] = {{"normalize", 'e', "softmax", "softmax|sum"}, EV_END};
static const char *const I_SIMPLE[] = {"inputs", NULL};

static attn_status op_simple_self_attention(ev *e) {
    attn_tensor x, s, w, o;
    ATTN_TRY(ev_input(e, "inputs", 1, 2, 3, &x));
    ATTN_TRY(ev_ready(e));
    int b3 = x.ndim == 3;
    int64_t B = b3 ? x.shape[0] : 1, T = x.shape[b3], E = x.shape[b3 + 1];
    int64_t ws[3] = {B, T, T}, os[3] = {B, T, E};
    ATTN_TRY(ev_new(e, "attn_scores", x.ndim, ws + !b3, &s));
    ATTN_TRY(ev_new(e, "attn_weights", x.ndim, ws + !b3, &w));
    ATTN_TRY(ev_new(e, "out", x.ndim, os + !b3, &o));
    attn_normalize norm = ev_e(e, "normalize") ? ATTN_NORM_SUM : ATTN_NORM_SOFTMAX;
    ATTN_TRY(attn_simple_self_attention(e->ctx, &x, norm, &s, &w, &o));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_scores", &s));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    /* the cotangent is that of "out" (the context vectors) only */
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.inputs", &x, &dx));
    ATTN_TRY(attn_simple_self_attention_backward(e->ctx, &x, norm, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "inputs", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_SEED_V1[] = {{"d_in", 'i', EV_REQ, NULL}, {"d_out", 'i', EV_REQ, NULL},
                                    EV_END};
static const ev_attr A_SEED_V2[] = {{"d_in", 'i', EV_REQ, NULL}, {"d_out", 'i', EV_REQ, NULL},
                                    {"qkv_bias", 'b', "false", NULL}, EV_END};
static const ev_attr A_SEED_CAUSAL[] = {
    {"d_in", 'i', EV_REQ, NULL},           {"d_out", 'i', EV_REQ, NULL},
    {"context_length", 'i', EV_REQ, NULL}, {"dropout", 'f', "0", NULL},
    {"qkv_bias", 'b', "false", NULL},      EV_END};
static const ev_attr A_SEED_MHA[] = {
    {"d_in", 'i', EV_REQ, NULL},           {"d_out", 'i', EV_REQ, NULL},
    {"context_length", 'i', EV_REQ, NULL}, {"dropout", 'f', "0", NULL},
    {"num_heads", 'i', EV_REQ, NULL},      {"qkv_bias", 'b', "false", NULL},
    EV_END};
static const char *const I_SEED[] = {"x", NULL};
static const char *const I_SEED_MASKED[] = {"x", "mask", NULL};

/* The seed modules' registered buffer: triu(ones(C, C), diagonal=1).  It is derived from
 * context_length, so anything else in the file would be a different model: refuse it. */
static attn_status ev_seed_mask(ev *e, int64_t C) {
    attn_st_tensor info;
    if (ev_find(e, "mask", &info) < 0) return ATTN_OK;
    ATTN_TRY(ev_dims(e, &info, "mask", 2, 2));
    char sb[96];
    ATTN_FAIL_IF(info.shape[0] != C || info.shape[1] != C, e->ctx, ATTN_E_SHAPE,
                 "tensor 'mask' has shape %s, expected [%lld, %lld] (context_length)",
                 attn__dims_str(info.shape, info.ndim, sb, sizeof sb), (long long)C, (long long)C);
    const unsigned char *bytes = NULL;
    float *f = NULL;
    if (info.dtype == ATTN_BOOL || info.dtype == ATTN_U8)
        bytes = info.data;
    else
        ATTN_TRY(ev_to_f32(e, &info, "mask", &f));
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < C; j++) {
            /* the seed reads it as mask.bool(): nonzero = masked */
            double got = bytes ? bytes[i * C + j] : f[i * C + j];
            ATTN_FAIL_IF((got != 0.0) != (j > i), e->ctx, ATTN_E_INVALID,
                         "tensor 'mask' is not the causal buffer triu(ones(%lld, %lld), 1): "
                         "element [%lld, %lld] is %g", (long long)C, (long long)C, (long long)i,
                         (long long)j, got);
        }
    return ATTN_OK;
}

static attn_status ev_seed(ev *e, attn_seed_attention_kind kind) {
    attn_seed_attention_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind;
    cfg.d_in = ev_i(e, "d_in");
    cfg.d_out = ev_i(e, "d_out");
    cfg.qkv_bias = ev_b(e, "qkv_bias");
    cfg.dropout = (float)ev_f(e, "dropout");
    cfg.num_heads = kind == ATTN_SEED_MULTIHEAD ? ev_i(e, "num_heads") : 1;
    if (kind == ATTN_SEED_MULTIHEAD)
        ATTN_TRY(ev_heads_divide(e, "d_out", cfg.d_out, "num_heads", cfg.num_heads));
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_seed_attention_create(e->ctx, &cfg, &m), &m, ""));
    int masked = kind == ATTN_SEED_CAUSAL || kind == ATTN_SEED_MULTIHEAD;
    attn_tensor x, o, w;
    /* the seed's CausalAttention and MultiHeadAttention unpack b, num_tokens, d_in = x.shape */
    ATTN_TRY(ev_input(e, "x", 1, masked ? 3 : 2, 3, &x));
    int64_t C = masked ? ev_i(e, "context_length") : 0;
    if (masked) {
        ATTN_FAIL_IF(C <= 0, e->ctx, ATTN_E_INVALID,
                     "attribute 'context_length' must be positive, got %lld", (long long)C);
        ATTN_TRY(ev_seed_mask(e, C));
    }
    ATTN_TRY(ev_ready(e));
    int b3 = x.ndim == 3;
    int64_t B = b3 ? x.shape[0] : 1, T = x.shape[b3];
    ATTN_FAIL_IF(masked && T > C, e->ctx, ATTN_E_SHAPE,
                 "x has %lld tokens, more than context_length (%lld)", (long long)T,
                 (long long)C);
    if (!b3) {
        int64_t xs[3] = {1, x.shape[0], x.shape[1]};
        x = ev_reshape(&x, 3, xs);
    }
    int64_t heads = kind == ATTN_SEED_MULTIHEAD ? cfg.num_heads : 1;
    int64_t os[3] = {B, T, cfg.d_out}, ws[4] = {B, heads, T, T};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 4, ws, &w));
    ATTN_TRY(attn_seed_attention_forward(e->ctx, m, &x, NULL, &o, &w));
    if (b3)
        ATTN_TRY(ev_write(e, "out", &o));
    else
        ATTN_TRY(ev_write_as(e, "out", &o, 2, os + 1));
    /* attn_weights is always [B, heads, T, T] (B = 1 for a 2-D x): docs/eval-format.md */
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out(e, b3 ? 3 : 2, b3 ? os : os + 1, &go));
    go = ev_reshape(&go, 3, os);
    ATTN_TRY(ev_grad_like(e, "grad.x", &x, &dx));
    ATTN_TRY(attn_seed_attention_backward(e->ctx, m, &x, NULL, &go, &dx));
    if (b3)
        ATTN_TRY(ev_write_grad(e, "x", &dx));
    else
        ATTN_TRY(ev_write_grad_as(e, "x", &dx, 2, x.shape + 1));
    return ev_write_param_grads(e);
}

static attn_status op_self_attention_v1(ev *e) { return ev_seed(e, ATTN_SEED_SELF_V1); }
static attn_status op_self_attention_v2(ev *e) { return ev_seed(e, ATTN_SEED_SELF_V2); }
static attn_status op_causal_attention(ev *e) { return ev_seed(e, ATTN_SEED_CAUSAL); }
static attn_status op_seed_multihead_attention(ev *e) { return ev_seed(e, ATTN_SEED_MULTIHEAD); }

/* ---- general and additive attention ----------------------------------------------------- */

static const ev_attr A_GENERAL[] = {
    {"query_dim", 'i', EV_REQ, NULL}, {"input_dim", 'i', EV_REQ, NULL},
    {"value_dim", 'i', EV_REQ, NULL}, {"bias", 'b', "false", NULL},
    {"self_attention", 'b', "false", NULL}, EV_END};
static const char *const I_GENERAL[] = {"query", "inputs", "attn_mask", NULL};

static attn_status op_general_attention(ev *e) {
    attn_general_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.query_dim = ev_i(e, "query_dim");
    cfg.input_dim = ev_i(e, "input_dim");
    cfg.value_dim = ev_i(e, "value_dim");
    cfg.bias = ev_b(e, "bias");
    cfg.self_attention = ev_b(e, "self_attention");
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_general_attention_create(e->ctx, &cfg, &m), &m, ""));
    attn_tensor q, x, o, w;
    attn_mask mask;
    ATTN_FAIL_IF(cfg.self_attention && ev_present(e, "query"), e->ctx, ATTN_E_INVALID,
                 "tensor 'query' is not used when self_attention = true (the queries are "
                 "projected from 'inputs')");
    if (!cfg.self_attention) ATTN_TRY(ev_input(e, "query", 1, 3, 3, &q));
    ATTN_TRY(ev_input(e, "inputs", 1, 3, 3, &x));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 3, &mask));
    ATTN_TRY(ev_ready(e));
    int64_t B = x.shape[0], S = x.shape[1], L = cfg.self_attention ? S : q.shape[1];
    int64_t os[3] = {B, L, cfg.value_dim}, ws[3] = {B, L, S};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_general_attention_forward(e->ctx, m, cfg.self_attention ? NULL : &q, &x,
                                            opt_mask(&mask), &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dq, dx;
    memset(&dq, 0, sizeof dq);
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    if (!cfg.self_attention) ATTN_TRY(ev_grad_like(e, "grad.query", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.inputs", &x, &dx));
    ATTN_TRY(attn_general_attention_backward(e->ctx, m, cfg.self_attention ? NULL : &q, &x,
                                             opt_mask(&mask), &go, dq.data ? &dq : NULL, &dx));
    if (dq.data) ATTN_TRY(ev_write_grad(e, "query", &dq));
    ATTN_TRY(ev_write_grad(e, "inputs", &dx));
    return ev_write_param_grads(e);
}

static const ev_attr A_ADDITIVE[] = {{"query_size", 'i', EV_REQ, NULL},
                                     {"key_size", 'i', EV_REQ, NULL},
                                     {"num_hiddens", 'i', EV_REQ, NULL},
                                     {"dropout", 'f', "0", NULL}, EV_END};
static const char *const I_ADDITIVE[] = {"queries", "keys", "values", "attn_mask", NULL};

static attn_status op_additive_attention(ev *e) {
    attn_module *m = NULL;
    ATTN_TRY(ev_module(e, attn_additive_attention_create(e->ctx, ev_i(e, "query_size"),
                                                         ev_i(e, "key_size"),
                                                         ev_i(e, "num_hiddens"), &m),
                       &m, ""));
    attn_tensor q, k, v, o, w;
    attn_mask mask;
    ATTN_TRY(ev_input(e, "queries", 1, 3, 3, &q));
    ATTN_TRY(ev_input(e, "keys", 1, 3, 3, &k));
    ATTN_TRY(ev_input(e, "values", 1, 3, 3, &v));
    ATTN_TRY(ev_mask(e, "attn_mask", ATTN_MASK_KEEP, 3, &mask));
    ATTN_TRY(ev_ready(e));
    int64_t os[3] = {q.shape[0], q.shape[1], v.shape[2]}, ws[3] = {q.shape[0], q.shape[1],
                                                                    k.shape[1]};
    ATTN_TRY(ev_new(e, "out", 3, os, &o));
    ATTN_TRY(ev_new(e, "attn_weights", 3, ws, &w));
    ATTN_TRY(attn_additive_attention_forward(e->ctx, m, &q, &k, &v, opt_mask(&mask), &o, &w));
    ATTN_TRY(ev_write(e, "out", &o));
    ATTN_TRY(ev_write(e, "attn_weights", &w));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dq, dk, dv;
    ATTN_TRY(ev_grad_out_like(e, &o, &go));
    ATTN_TRY(ev_grad_like(e, "grad.queries", &q, &dq));
    ATTN_TRY(ev_grad_like(e, "grad.keys", &k, &dk));
    ATTN_TRY(ev_grad_like(e, "grad.values", &v, &dv));
    ATTN_TRY(attn_additive_attention_backward(e->ctx, m, &q, &k, &v, opt_mask(&mask), &go, &dq,
                                              &dk, &dv));
    ATTN_TRY(ev_write_grad(e, "queries", &dq));
    ATTN_TRY(ev_write_grad(e, "keys", &dk));
    ATTN_TRY(ev_write_grad(e, "values", &dv));
    return ev_write_param_grads(e);
}

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(sdpa, A_SDPA, NULL, I_SDPA);
EV_OP(multihead_attention, A_MHA, NULL, I_MHA);
EV_OP(simple_self_attention, A_SIMPLE, NULL, I_SIMPLE);
EV_OP(self_attention_v1, A_SEED_V1, NULL, I_SEED);
EV_OP(self_attention_v2, A_SEED_V2, NULL, I_SEED);
EV_OP(causal_attention, A_SEED_CAUSAL, NULL, I_SEED_MASKED);
EV_OP(seed_multihead_attention, A_SEED_MHA, NULL, I_SEED_MASKED);
EV_OP(general_attention, A_GENERAL, NULL, I_GENERAL);
EV_OP(additive_attention, A_ADDITIVE, NULL, I_ADDITIVE);
