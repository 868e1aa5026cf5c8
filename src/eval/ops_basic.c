/* attn eval ops: the stateless ops (linear, layer norm, activations, softmax, embedding,
 * cross-entropy).  Each op with its attribute and input lists; see eval.h. */
#include <string.h>

#include "eval.h"

/* ---- stateless ops ----------------------------------------------------------------------- */

static const ev_attr A_LINEAR[] = {{"in_features", 'i', EV_OPT, NULL},
                                   {"out_features", 'i', EV_OPT, NULL}, EV_END};
static const char *const I_WB[] = {"input", "weight", "bias", NULL};

static attn_status op_linear(ev *e) {
    attn_tensor x, W, b, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &W));
    ATTN_TRY(ev_input(e, "bias", 0, 1, 1, &b));
    ATTN_TRY(ev_ready(e));
    ATTN_FAIL_IF(ev_has(e, "in_features") && ev_i(e, "in_features") != W.shape[1], e->ctx,
                 ATTN_E_SHAPE, "attribute 'in_features' (%lld) does not match weight [%lld, %lld]",
                 (long long)ev_i(e, "in_features"), (long long)W.shape[0],
                 (long long)W.shape[1]);
    ATTN_FAIL_IF(ev_has(e, "out_features") && ev_i(e, "out_features") != W.shape[0], e->ctx,
                 ATTN_E_SHAPE,
                 "attribute 'out_features' (%lld) does not match weight [%lld, %lld]",
                 (long long)ev_i(e, "out_features"), (long long)W.shape[0],
                 (long long)W.shape[1]);
    int64_t ys[4];
    for (int d = 0; d < x.ndim; d++) ys[d] = x.shape[d];
    ys[x.ndim - 1] = W.shape[0];
    ATTN_TRY(ev_new(e, "out", x.ndim, ys, &y));
    ATTN_TRY(attn_linear(e->ctx, &x, &W, b.data ? &b : NULL, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx, dW, db;
    memset(&db, 0, sizeof db);
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &W, &dW));
    if (b.data) ATTN_TRY(ev_grad_like(e, "grad.bias", &b, &db));
    ATTN_TRY(attn_linear_backward(e->ctx, &x, &W, &go, &dx, &dW, db.data ? &db : NULL));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    ATTN_TRY(ev_write_grad(e, "weight", &dW));
    if (db.data) ATTN_TRY(ev_write_grad(e, "bias", &db));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_LAYER_NORM[] = {{"eps", 'f', "1e-5", NULL},
                                       {"normalized_shape", 'i', EV_OPT, NULL},
                                       {"elementwise_affine", 'b', "true", NULL}, EV_END};

static attn_status op_layer_norm(ev *e) {
    attn_tensor x, w, b, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_input(e, "weight", 0, 1, 1, &w));
    ATTN_TRY(ev_input(e, "bias", 0, 1, 1, &b));
    ATTN_FAIL_IF(!ev_b(e, "elementwise_affine") && (w.data || b.data), e->ctx, ATTN_E_INVALID,
                 "tensor '%s' is given but elementwise_affine = false", w.data ? "weight" : "bias");
    ATTN_TRY(ev_ready(e));
    int64_t E = x.shape[x.ndim - 1];
    ATTN_FAIL_IF(ev_has(e, "normalized_shape") && ev_i(e, "normalized_shape") != E, e->ctx,
                 ATTN_E_SHAPE, "attribute 'normalized_shape' (%lld) must equal the last "
                 "dimension of the input (%lld)", (long long)ev_i(e, "normalized_shape"),
                 (long long)E);
    double eps = ev_f(e, "eps");
    ATTN_FAIL_IF(!(eps > 0.0) || eps > 3.4e38, e->ctx, ATTN_E_INVALID,
                 "attribute 'eps' must be positive, got %g", eps);
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_layer_norm(e->ctx, &x, w.data ? &w : NULL, b.data ? &b : NULL, (float)eps,
                             &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx, dw, db;
    memset(&dw, 0, sizeof dw);
    memset(&db, 0, sizeof db);
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    if (w.data) ATTN_TRY(ev_grad_like(e, "grad.weight", &w, &dw));
    if (b.data) ATTN_TRY(ev_grad_like(e, "grad.bias", &b, &db));
    ATTN_TRY(attn_layer_norm_backward(e->ctx, &x, w.data ? &w : NULL, (float)eps, &go, &dx,
                                      dw.data ? &dw : NULL, db.data ? &db : NULL));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    if (dw.data) ATTN_TRY(ev_write_grad(e, "weight", &dw));
    if (db.data) ATTN_TRY(ev_write_grad(e, "bias", &db));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const char *const I_INPUT[] = {"input", NULL};

static attn_status ev_act(ev *e, attn_activation act) {
    attn_tensor x, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_activate(e->ctx, act, &x, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(attn_activate_backward(e->ctx, act, &x, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_GELU[] = {{"approximate", 'e', "none", "none|tanh"}, EV_END};

static attn_status op_relu(ev *e) { return ev_act(e, ATTN_ACT_RELU); }
static attn_status op_tanh(ev *e) { return ev_act(e, ATTN_ACT_TANH); }
static attn_status op_gelu(ev *e) {
    return ev_act(e, ev_e(e, "approximate") ? ATTN_ACT_GELU_TANH : ATTN_ACT_GELU);
}

static const ev_attr A_SOFTMAX[] = {{"dim", 'i', "-1", NULL}, EV_END};

static attn_status op_softmax(ev *e) {
    attn_tensor x, y;
    ATTN_TRY(ev_input(e, "input", 1, 1, 4, &x));
    ATTN_TRY(ev_ready(e));
    int64_t dim = ev_i(e, "dim");
    ATTN_FAIL_IF(dim != -1 && dim != x.ndim - 1, e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'dim' = %lld: only the last dimension (-1 or %d) is supported",
                 (long long)dim, x.ndim - 1);
    ATTN_TRY(ev_new_like(e, &x, &y));
    ATTN_TRY(attn_softmax(e->ctx, &x, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    attn_tensor go, dx;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    ATTN_TRY(attn_softmax_backward(e->ctx, &y, &go, &dx));
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const char *const I_EMBEDDING[] = {"input", "weight", NULL};

static attn_status op_embedding(ev *e) {
    attn_tensor ids, W, y;
    ATTN_TRY(ev_ids(e, "input", 1, 3, &ids));
    ATTN_TRY(ev_input(e, "weight", 1, 2, 2, &W));
    ATTN_TRY(ev_ready(e));
    int64_t ys[4];
    for (int d = 0; d < ids.ndim; d++) ys[d] = ids.shape[d];
    ys[ids.ndim] = W.shape[1];
    ATTN_TRY(ev_new(e, "out", ids.ndim + 1, ys, &y));
    ATTN_TRY(attn_embedding(e->ctx, &ids, &W, &y));
    ATTN_TRY(ev_write(e, "out", &y));
    if (!e->bwd) return ATTN_OK;
    /* ids have no gradient */
    attn_tensor go, dW;
    ATTN_TRY(ev_grad_out_like(e, &y, &go));
    ATTN_TRY(ev_grad_like(e, "grad.weight", &W, &dW));
    ATTN_TRY(attn_embedding_backward(e->ctx, &ids, &go, &dW));
    ATTN_TRY(ev_write_grad(e, "weight", &dW));
    e->bwd_done = 1;
    return ATTN_OK;
}

static const ev_attr A_CROSS_ENTROPY[] = {{"ignore_index", 'i', "-100", NULL},
                                          {"label_smoothing", 'f', "0.0", NULL},
                                          {"reduction", 'e', "mean", "mean|sum|none"}, EV_END};
static const char *const I_CROSS_ENTROPY[] = {"input", "target", NULL};

/* F.cross_entropy(input [N, C], target [N], ignore_index, label_smoothing) with reduction
 * "mean": out is the 0-d loss, as PyTorch's. */
static attn_status op_cross_entropy(ev *e) {
    attn_tensor x, t, dx;
    char s1[96], s2[96];
    ATTN_TRY(ev_input(e, "input", 1, 2, 2, &x));
    ATTN_TRY(ev_ids(e, "target", 1, 1, &t));
    ATTN_TRY(ev_ready(e));
    ATTN_FAIL_IF(ev_e(e, "reduction") != 0, e->ctx, ATTN_E_UNSUPPORTED,
                 "attribute 'reduction' = \"%s\": only \"mean\" is supported",
                 ev_e(e, "reduction") == 1 ? "sum" : "none");
    ATTN_FAIL_IF(t.shape[0] != x.shape[0], e->ctx, ATTN_E_SHAPE,
                 "target %s does not match input %s: one target per row is needed",
                 attn__shape_str(&t, s1, sizeof s1), attn__shape_str(&x, s2, sizeof s2));
    double ls = ev_f(e, "label_smoothing");
    ATTN_FAIL_IF(!(ls >= 0.0 && ls < 1.0), e->ctx, ATTN_E_INVALID,
                 "attribute 'label_smoothing' must be in [0, 1), got %g", ls);
    attn_tensor go;
    memset(&dx, 0, sizeof dx);
    if (e->bwd) {
        ATTN_TRY(ev_grad_out(e, 0, NULL, &go)); /* the loss is 0-d, so is its cotangent */
        ATTN_TRY(ev_grad_like(e, "grad.input", &x, &dx));
    }
    float loss = 0.0f;
    ATTN_TRY(attn_cross_entropy(e->ctx, &x, &t, ev_i(e, "ignore_index"), (float)ls, &loss,
                                dx.data ? &dx : NULL));
    ATTN_TRY(attn_st_writer_add(e->out, "out", ATTN_F32, 0, NULL, &loss));
    if (!e->bwd) return ATTN_OK;
    /* dx holds the gradient of the mean: scale it by the cotangent of the loss */
    float g = *(const float *)go.data, *d = dx.data;
    ATTN_FAIL_IF(!isfinite(g), e->ctx, ATTN_E_NONFINITE, "tensor 'grad.out' is %g", (double)g);
    for (int64_t i = 0, n = attn_tensor_numel(&dx); i < n; i++) d[i] *= g;
    ATTN_TRY(ev_write_grad(e, "input", &dx));
    e->bwd_done = 1;
    return ATTN_OK;
}

/* ---- registration (the order of the table is EV_OPS in eval.h) ---------------------------- */

EV_OP(linear, A_LINEAR, NULL, I_WB);
EV_OP(layer_norm, A_LAYER_NORM, NULL, I_WB);
EV_OP(relu, A_NONE, NULL, I_INPUT);
EV_OP(gelu, A_GELU, NULL, I_INPUT);
EV_OP(tanh, A_NONE, NULL, I_INPUT);
EV_OP(softmax, A_SOFTMAX, NULL, I_INPUT);
EV_OP(embedding, A_NONE, NULL, I_EMBEDDING);
EV_OP(cross_entropy, A_CROSS_ENTROPY, NULL, I_CROSS_ENTROPY);
