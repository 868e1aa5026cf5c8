/* Training against PyTorch, checkpoints in both directions and determinism.
 *
 *  (a) trajectory: from the initial weights and batches of fixtures/training/
 *      trajectory.safetensors (tests/gen_training.py), K steps of attn_seq2seq_forward,
 *      attn_cross_entropy, attn_seq2seq_backward, attn_module_clip_grad_norm and
 *      attn_adamw_step give PyTorch's losses, gradient norms and final weights.
 *  (b) PyTorch -> attn: seq2seq_pt.safetensors (a PyTorch state_dict) loads into
 *      attn_seq2seq and gives PyTorch's logits.
 *  (c) attn -> PyTorch: seq2seq_attn.safetensors was written by this program
 *      (--write-attn-checkpoint PATH) and gen_training.py checks that PyTorch gives its logits;
 *      here the current attn must still give them (a change of layout or names is caught).
 *  (d) determinism: training with dropout on 1 and 2 threads gives the same bits; so does
 *      attn_dates_train, and a run resumed from a state file continues bit-identically.
 *  (e) dropout at module level: the fraction of zeroed hidden units of attn_ffn_forward.
 *
 * Run from the tests directory.  Tolerances: 1e-4 relative for losses; 1e-4 * max(1, max|ref|)
 * per tensor for weights and logits (see KEY_BIAS_NOTE in gen_training.py for the key block
 * of in_proj_bias). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_tasks.h"
#include "testutil.h"

#define DIR "fixtures/training/"
#define TOL 1e-4

static attn_ctx *ctx;

/* ---- helpers ----------------------------------------------------------------------------- */
static int64_t meta_i(const attn_st *st, const char *key) {
    const char *v = attn_st_meta(st, key);
    TU_CHECK(v != NULL, "metadata %s missing", key);
    return v ? strtoll(v, NULL, 10) : 0;
}
static double meta_f(const attn_st *st, const char *key) {
    const char *v = attn_st_meta(st, key);
    TU_CHECK(v != NULL, "metadata %s missing", key);
    return v ? strtod(v, NULL) : 0.0;
}

static int cfg_from_meta(const attn_st *st, attn_seq2seq_config *c) {
    memset(c, 0, sizeof *c);
    c->tf = attn_transformer_defaults(meta_i(st, "d_model"), meta_i(st, "nhead"));
    c->tf.num_encoder_layers = meta_i(st, "num_encoder_layers");
    c->tf.num_decoder_layers = meta_i(st, "num_decoder_layers");
    c->tf.dim_feedforward = meta_i(st, "dim_feedforward");
    c->tf.dropout = (float)meta_f(st, "dropout");
    c->tf.layer_norm_eps = (float)meta_f(st, "layer_norm_eps");
    c->tf.norm_first = (int)meta_i(st, "norm_first");
    const char *act = attn_st_meta(st, "activation");
    if (!act || (strcmp(act, "relu") && strcmp(act, "gelu"))) {
        TU_CHECK(0, "activation %s not relu or gelu", act ? act : "(none)");
        return 0;
    }
    c->tf.activation = strcmp(act, "relu") == 0 ? ATTN_ACT_RELU : ATTN_ACT_GELU;
    c->src_vocab = meta_i(st, "src_vocab");
    c->tgt_vocab = meta_i(st, "tgt_vocab");
    c->max_len = meta_i(st, "max_len");
    c->pad_id = meta_i(st, "pad_id");
    return tu_failures == 0;
}

static void put_cfg(attn_st_writer *w, const attn_seq2seq_config *c) {
    char b[64];
#define PUT_I(key, v) (snprintf(b, sizeof b, "%lld", (long long)(v)), attn_st_writer_meta(w, key, b))
#define PUT_F(key, v) (snprintf(b, sizeof b, "%.9g", (double)(v)), attn_st_writer_meta(w, key, b))
    PUT_I("d_model", c->tf.d_model);
    PUT_I("nhead", c->tf.nhead);
    PUT_I("num_encoder_layers", c->tf.num_encoder_layers);
    PUT_I("num_decoder_layers", c->tf.num_decoder_layers);
    PUT_I("dim_feedforward", c->tf.dim_feedforward);
    PUT_F("dropout", c->tf.dropout);
    PUT_F("layer_norm_eps", c->tf.layer_norm_eps);
    PUT_I("norm_first", c->tf.norm_first);
    attn_st_writer_meta(w, "activation", c->tf.activation == ATTN_ACT_RELU ? "relu" : "gelu");
    PUT_I("src_vocab", c->src_vocab);
    PUT_I("tgt_vocab", c->tgt_vocab);
    PUT_I("max_len", c->max_len);
    PUT_I("pad_id", c->pad_id);
#undef PUT_I
#undef PUT_F
}

/* A copy of an I64 tensor (file data may be unaligned); shape to sh[2]. */
static int64_t *get_ids(const attn_st *st, const char *name, int64_t sh[2]) {
    attn_st_tensor t;
    if (!TU_STATUS(attn_st_find(st, name, &t), ATTN_OK, ctx)) return NULL;
    TU_CHECK(t.dtype == ATTN_I64 && t.ndim == 2, "%s: I64 [B, L] expected", name);
    if (t.dtype != ATTN_I64 || t.ndim != 2) return NULL;
    int64_t *p = malloc(t.nbytes);
    memcpy(p, t.data, t.nbytes);
    sh[0] = t.shape[0], sh[1] = t.shape[1];
    return p;
}

static float *get_f32(const attn_st *st, const char *name, int64_t *numel) {
    attn_st_tensor t;
    if (!TU_STATUS(attn_st_find(st, name, &t), ATTN_OK, ctx)) return NULL;
    float *p = malloc((size_t)t.numel * sizeof(float) + 1);
    if (!TU_STATUS(attn_st_to_f32(ctx, &t, p, (size_t)t.numel), ATTN_OK, ctx)) {
        free(p);
        return NULL;
    }
    if (numel) *numel = t.numel;
    return p;
}

static int is_param_name(const char *n) {
    return strncmp(n, "batch.", 6) != 0 && strncmp(n, "expected.", 9) != 0 &&
           strncmp(n, "adamw.", 6) != 0;
}

/* Every parameter-named tensor of st is a parameter of m and there are as many as m has. */
static void same_names(const attn_st *st, const attn_module *m, const char *what) {
    size_t n = 0;
    for (size_t i = 0; i < attn_st_count(st); i++) {
        attn_st_tensor t;
        attn_st_at(st, i, &t);
        if (!is_param_name(t.name)) continue;
        attn_tensor v;
        n++;
        TU_CHECK(attn_module_param(ctx, m, t.name, &v) == ATTN_OK, "%s: %s is not a parameter",
                 what, t.name);
    }
    TU_CHECK(n == attn_module_param_count(m), "%s: %zu tensors for %zu parameters", what, n,
             attn_module_param_count(m));
}

/* Copies of every parameter, in order (for bit comparisons). */
static float *snapshot(const attn_module *m) {
    float *s = malloc((size_t)attn_module_numel(m) * sizeof(float)), *p = s;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        attn_tensor v;
        attn_module_param_at(m, i, NULL, &v);
        int64_t n = attn_tensor_numel(&v);
        memcpy(p, v.data, (size_t)n * sizeof(float));
        p += n;
    }
    return s;
}

/* Batch as gen_training.py's make_batch (other numbers): src 1..S tokens in [3, Vs) then pad,
 * tin = [BOS, y, pad...], tout = [y, EOS, pad...], y 1..T-1 tokens; row 0 full. */
static void make_batch(uint64_t seed, int64_t B, int64_t S, int64_t T, int64_t Vs, int64_t Vt,
                       int64_t *src, int64_t *tin, int64_t *tout) {
    uint64_t s = seed;
    memset(src, 0, (size_t)(B * S) * sizeof *src);
    memset(tin, 0, (size_t)(B * T) * sizeof *tin);
    if (tout) memset(tout, 0, (size_t)(B * T) * sizeof *tout);
    for (int64_t b = 0; b < B; b++) {
        int64_t ns = b == 0 ? S : 1 + (int64_t)(tu_rand(&s) % (uint64_t)S);
        int64_t nt = b == 0 ? T - 1 : 1 + (int64_t)(tu_rand(&s) % (uint64_t)(T - 1));
        for (int64_t i = 0; i < ns; i++) src[b * S + i] = 3 + (int64_t)(tu_rand(&s) % (uint64_t)(Vs - 3));
        tin[b * T] = 1;
        for (int64_t i = 0; i < nt; i++) {
            int64_t y = 3 + (int64_t)(tu_rand(&s) % (uint64_t)(Vt - 3));
            tin[b * T + 1 + i] = y;
            if (tout) tout[b * T + i] = y;
        }
        if (tout) tout[b * T + nt] = 2;
    }
}

/* One training step as the PyTorch loop of gen_training.py. */
typedef struct train_setup {
    attn_module *m;
    attn_adamw *opt;
    float clip, label_smoothing;
    int64_t ignore_index;
} train_setup;

static int train_step(attn_ctx *c, train_setup *t, const int64_t *src, const int64_t *tin,
                      const int64_t *tout, int64_t B, int64_t S, int64_t T, int64_t V,
                      const attn_run *run, float lr, float *loss, float *gnorm) {
    int64_t ss[2] = {B, S}, ts[2] = {B, T}, tn[1] = {B * T};
    float *lg = malloc((size_t)(B * T * V) * sizeof(float));
    float *dl = malloc((size_t)(B * T * V) * sizeof(float));
    attn_tensor Src = attn_tensor_make((void *)src, ATTN_I64, 2, ss);
    attn_tensor Tin = attn_tensor_make((void *)tin, ATTN_I64, 2, ts);
    attn_tensor Tout = attn_tensor_make((void *)tout, ATTN_I64, 1, tn);
    attn_tensor Lg = attn_view3(lg, B, T, V), Lg2 = attn_view2(lg, B * T, V);
    attn_tensor Dl = attn_view3(dl, B, T, V), Dl2 = attn_view2(dl, B * T, V);
    int ok = TU_STATUS(attn_seq2seq_forward(c, t->m, &Src, &Tin, run, &Lg, NULL), ATTN_OK, c) &&
             TU_STATUS(attn_cross_entropy(c, &Lg2, &Tout, t->ignore_index, t->label_smoothing,
                                          loss, &Dl2), ATTN_OK, c);
    if (ok) {
        attn_module_zero_grad(t->m);
        ok = TU_STATUS(attn_seq2seq_backward(c, t->m, &Src, &Tin, run, &Dl), ATTN_OK, c) &&
             TU_STATUS(attn_module_clip_grad_norm(c, t->m, t->clip, gnorm), ATTN_OK, c) &&
             TU_STATUS(attn_adamw_step(c, t->opt, t->m, lr), ATTN_OK, c);
    }
    free(lg);
    free(dl);
    return ok;
}

/* ---- (a) trajectory ------------------------------------------------------------------------ */
/* Largest |grad| in the key block (rows E..2E-1) of every in_proj_bias, and largest |grad|. */
static void key_bias_grad(const attn_module *m, int64_t E, double *kmax, double *gmax) {
    *kmax = *gmax = 0;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor g;
        attn_module_grad_at(m, i, &name, &g);
        const float *p = g.data;
        int kb = strstr(name, "in_proj_bias") != NULL;
        for (int64_t j = 0; j < attn_tensor_numel(&g); j++) {
            double a = fabs(p[j]);
            if (kb && j >= E && j < 2 * E) {
                if (a > *kmax) *kmax = a;
            } else if (a > *gmax) *gmax = a;
        }
    }
}

static void test_trajectory(void) {
    attn_st *st;
    if (!TU_STATUS(attn_st_read_file(ctx, DIR "trajectory.safetensors", &st), ATTN_OK, ctx)) return;
    attn_seq2seq_config cfg;
    attn_module *m = NULL;
    attn_adamw *opt = NULL;
    if (!cfg_from_meta(st, &cfg)) goto out;
    const int64_t K = meta_i(st, "steps"), warmup = meta_i(st, "warmup"),
                  total = meta_i(st, "total"), E = cfg.tf.d_model, V = cfg.tgt_vocab;
    const float lr_max = (float)meta_f(st, "lr_max"), lr_min = (float)meta_f(st, "lr_min");
    attn_adamw_config oc = attn_adamw_defaults();
    oc.lr = lr_max;
    oc.beta1 = (float)meta_f(st, "beta1"), oc.beta2 = (float)meta_f(st, "beta2");
    oc.eps = (float)meta_f(st, "eps"), oc.weight_decay = (float)meta_f(st, "weight_decay");
    if (!TU_STATUS(attn_seq2seq_create(ctx, &cfg, &m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_module_load(ctx, m, st, NULL, 1), ATTN_OK, ctx) ||
        !TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_adamw_create(ctx, m, &oc, &opt), ATTN_OK, ctx))
        goto out;
    same_names(st, m, "trajectory");
    float *ref_loss = get_f32(st, "expected.losses", NULL);
    float *ref_norm = get_f32(st, "expected.grad_norms", NULL);
    if (!ref_loss || !ref_norm) goto out;
    train_setup ts = {m, opt, (float)meta_f(st, "clip"), (float)meta_f(st, "label_smoothing"),
                      meta_i(st, "ignore_index")};
    double worst_loss = 0, worst_norm = 0, worst_kgrad = 0, sum_lr = 0;
    for (int64_t k = 0; k < K; k++) {
        char n1[64], n2[64], n3[64];
        snprintf(n1, sizeof n1, "batch.%lld.src", (long long)k);
        snprintf(n2, sizeof n2, "batch.%lld.tgt_in", (long long)k);
        snprintf(n3, sizeof n3, "batch.%lld.tgt_out", (long long)k);
        int64_t ss[2] = {0, 0}, ts2[2] = {0, 0}, to[2] = {0, 0};
        int64_t *src = get_ids(st, n1, ss), *tin = get_ids(st, n2, ts2), *tout = get_ids(st, n3, to);
        float loss = 0, gnorm = 0, lr = attn_lr_warmup_cosine(k, warmup, total, lr_max, lr_min);
        attn_run run = {1, 99, (uint64_t)k << 16, 0}; /* training mode; dropout is 0 */
        int ok = src && tin && tout && ts2[0] == ss[0] && to[0] == ss[0] && to[1] == ts2[1] &&
                 train_step(ctx, &ts, src, tin, tout, ss[0], ss[1], ts2[1], V, &run, lr, &loss,
                            &gnorm);
        free(src), free(tin), free(tout);
        if (!ok) break;
        double el = fabs((double)loss - ref_loss[k]) / fabs((double)ref_loss[k]);
        double en = fabs((double)gnorm - ref_norm[k]) / fabs((double)ref_norm[k]);
        TU_CHECK(el <= TOL, "step %lld: loss %.8g, PyTorch %.8g (rel err %.3g)", (long long)k,
                 (double)loss, (double)ref_loss[k], el);
        TU_CHECK(en <= TOL, "step %lld: grad norm %.8g, PyTorch %.8g (rel err %.3g)",
                 (long long)k, (double)gnorm, (double)ref_norm[k], en);
        worst_loss = el > worst_loss ? el : worst_loss;
        worst_norm = en > worst_norm ? en : worst_norm;
        /* the key-bias gradient is zero mathematically: what is there is rounding noise
         * (measured after clipping, relative to the largest gradient entry) */
        double kmax, gmax;
        key_bias_grad(m, E, &kmax, &gmax);
        TU_CHECK(kmax <= 1e-5 * gmax, "step %lld: key-bias gradient %.3g is not noise (max %.3g)",
                 (long long)k, kmax, gmax);
        if (kmax / gmax > worst_kgrad) worst_kgrad = kmax / gmax;
        sum_lr += lr;
    }
    /* final weights; the key block of in_proj_bias apart (KEY_BIAS_NOTE in gen_training.py) */
    double worst = 0, worst_scale = 1, worst_key = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor v;
        char en[512];
        attn_module_param_at(m, i, &name, &v);
        snprintf(en, sizeof en, "expected.%s", name);
        int64_t n = 0;
        float *ref = get_f32(st, en, &n), *got = v.data;
        if (!ref) continue;
        TU_CHECK(n == attn_tensor_numel(&v), "%s: %lld values, expected %lld", name,
                 (long long)attn_tensor_numel(&v), (long long)n);
        double scale, err;
        if (strstr(name, "in_proj_bias")) {
            double s1, s2, e1 = tu_max_err(got, ref, (size_t)E, &s1);
            double e2 = tu_max_err(got + 2 * E, ref + 2 * E, (size_t)(n - 2 * E), &s2);
            double ek = tu_max_err(got + E, ref + E, (size_t)E, NULL);
            err = e1 > e2 ? e1 : e2;
            scale = s1 > s2 ? s1 : s2;
            TU_CHECK(ek <= 2 * sum_lr, "%s key block: max abs error %.3g > 2 * sum(lr) = %.3g",
                     name, ek, 2 * sum_lr);
            if (ek > worst_key) worst_key = ek;
        } else {
            err = tu_max_err(got, ref, (size_t)n, &scale);
        }
        scale = scale > 1 ? scale : 1;
        TU_CHECK(err <= TOL * scale, "final %s: max abs error %.3g > %.3g", name, err,
                 TOL * scale);
        if (err / scale > worst / worst_scale) worst = err, worst_scale = scale, worst_name = name;
        free(ref);
    }
    printf("trajectory: %lld steps, losses max rel err %.3g, grad norms %.3g; final weights "
           "worst %s max abs err %.3g (scale %.3g); key biases %.3g (bound %.3g; their "
           "gradient <= %.2g of the largest)\n",
           (long long)K, worst_loss, worst_norm, worst_name, worst, worst_scale, worst_key,
           2 * sum_lr, worst_kgrad);
    free(ref_loss);
    free(ref_norm);
out:
    attn_adamw_free(opt);
    attn_module_free(m);
    attn_st_free(st);
}

/* AdamW on its own (adamw.* of trajectory.safetensors): a Linear(5, 6)'s weight and bias with
 * the given gradients, learning rates and weight decay, against torch.optim.AdamW. */
static void test_adamw_alone(void) {
    attn_st *st;
    if (!TU_STATUS(attn_st_read_file(ctx, DIR "trajectory.safetensors", &st), ATTN_OK, ctx)) return;
    attn_module *m = NULL;
    attn_adamw *opt = NULL;
    attn_adamw_config oc = attn_adamw_defaults();
    oc.beta1 = (float)meta_f(st, "beta1"), oc.beta2 = (float)meta_f(st, "beta2");
    oc.eps = (float)meta_f(st, "eps"), oc.weight_decay = (float)meta_f(st, "adamw_weight_decay");
    float *lrs = get_f32(st, "adamw.lrs", NULL), *ew = get_f32(st, "adamw.expected.weight", NULL),
          *eb = get_f32(st, "adamw.expected.bias", NULL);
    attn_tensor w, b, gw, gb;
    if (!lrs || !ew || !eb || !TU_STATUS(attn_linear_create(ctx, 5, 6, 1, &m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_adamw_create(ctx, m, &oc, &opt), ATTN_OK, ctx))
        goto out;
    attn_module_param(ctx, m, "weight", &w);
    attn_module_param(ctx, m, "bias", &b);
    attn_module_grad(ctx, m, "weight", &gw);
    attn_module_grad(ctx, m, "bias", &gb);
    attn_st_tensor t;
    attn_st_find(st, "adamw.weight", &t);
    attn_st_to_f32(ctx, &t, w.data, 30);
    attn_st_find(st, "adamw.bias", &t);
    attn_st_to_f32(ctx, &t, b.data, 6);
    for (int k = 0; k < 4; k++) {
        char n[64];
        snprintf(n, sizeof n, "adamw.grad.%d.weight", k);
        if (!TU_STATUS(attn_st_find(st, n, &t), ATTN_OK, ctx)) goto out;
        attn_st_to_f32(ctx, &t, gw.data, 30);
        snprintf(n, sizeof n, "adamw.grad.%d.bias", k);
        if (!TU_STATUS(attn_st_find(st, n, &t), ATTN_OK, ctx)) goto out;
        attn_st_to_f32(ctx, &t, gb.data, 6);
        if (!TU_STATUS(attn_adamw_step(ctx, opt, m, lrs[k]), ATTN_OK, ctx)) goto out;
    }
    double sw, sb, e1 = tu_max_err(w.data, ew, 30, &sw), e2 = tu_max_err(b.data, eb, 6, &sb);
    tu_close("AdamW alone: weight", w.data, ew, 30, 1e-6);
    tu_close("AdamW alone: bias", b.data, eb, 6, 1e-6);
    printf("AdamW alone (4 steps, lr up to 0.1, weight decay %.2g): max abs err weight %.3g, "
           "bias %.3g\n", (double)oc.weight_decay, e1, e2);
out:
    free(lrs), free(ew), free(eb);
    attn_adamw_free(opt);
    attn_module_free(m);
    attn_st_free(st);
}

/* ---- (b), (c) checkpoints -------------------------------------------------------------------- */
static void check_checkpoint(const char *path, const char *what) {
    attn_st *st;
    if (!TU_STATUS(attn_st_read_file(ctx, path, &st), ATTN_OK, ctx)) return;
    attn_seq2seq_config cfg;
    attn_module *m = NULL;
    int64_t *src = NULL, *tgt = NULL;
    float *ref = NULL, *lg = NULL;
    if (!cfg_from_meta(st, &cfg) || !TU_STATUS(attn_seq2seq_create(ctx, &cfg, &m), ATTN_OK, ctx) ||
        !TU_STATUS(attn_module_load(ctx, m, st, NULL, 1), ATTN_OK, ctx))
        goto out;
    same_names(st, m, what);
    int64_t ss[2], ts[2], n = 0;
    src = get_ids(st, "batch.src", ss);
    tgt = get_ids(st, "batch.tgt", ts);
    ref = get_f32(st, "expected.logits", &n);
    if (!src || !tgt || !ref) goto out;
    int64_t V = cfg.tgt_vocab;
    TU_CHECK(n == ts[0] * ts[1] * V, "%s: expected.logits has %lld values", what, (long long)n);
    lg = malloc((size_t)n * sizeof(float));
    attn_tensor Src = attn_tensor_make(src, ATTN_I64, 2, ss), Tgt = attn_tensor_make(tgt, ATTN_I64, 2, ts);
    attn_tensor Lg = attn_view3(lg, ts[0], ts[1], V);
    if (!TU_STATUS(attn_seq2seq_forward(ctx, m, &Src, &Tgt, NULL, &Lg, NULL), ATTN_OK, ctx)) goto out;
    double scale, err = tu_max_err(lg, ref, (size_t)n, &scale);
    tu_close(what, lg, ref, (size_t)n, TOL);
    printf("%s: %zu parameters, logits [%lld, %lld, %lld] max abs err %.3g (scale %.3g)\n", what,
           attn_module_param_count(m), (long long)ts[0], (long long)ts[1], (long long)V, err,
           scale > 1 ? scale : 1);
out:
    free(src), free(tgt), free(ref), free(lg);
    attn_module_free(m);
    attn_st_free(st);
}

/* The attn -> PyTorch file: attn_module_init, every 1-D parameter (biases, layer norms) moved by
 * U(-0.2, 0.2) so that its layout matters, 3 AdamW steps in attn with dropout 0.1, then the
 * parameters (attn_module_save) and attn's logits on a batch (inference). */
static int write_attn_checkpoint(const char *path) {
    attn_seq2seq_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.tf = attn_transformer_defaults(32, 4);
    cfg.tf.num_encoder_layers = 1, cfg.tf.num_decoder_layers = 2;
    cfg.tf.dim_feedforward = 64, cfg.tf.dropout = 0.1f, cfg.tf.norm_first = 1;
    cfg.tf.activation = ATTN_ACT_RELU;
    cfg.src_vocab = 19, cfg.tgt_vocab = 21, cfg.max_len = 16, cfg.pad_id = 0;
    attn_module *m = NULL;
    attn_adamw *opt = NULL;
    attn_st_writer *w = NULL;
    int ok = TU_STATUS(attn_seq2seq_create(ctx, &cfg, &m), ATTN_OK, ctx) &&
             TU_STATUS(attn_module_init(ctx, m, 2024), ATTN_OK, ctx) &&
             TU_STATUS(attn_module_enable_grad(ctx, m), ATTN_OK, ctx) &&
             TU_STATUS(attn_adamw_create(ctx, m, NULL, &opt), ATTN_OK, ctx);
    for (size_t i = 0; ok && i < attn_module_param_count(m); i++) {
        attn_tensor v;
        attn_module_param_at(m, i, NULL, &v);
        if (v.ndim != 1) continue;
        float *p = v.data, *noise = malloc((size_t)v.shape[0] * sizeof(float));
        tu_fill(noise, (size_t)v.shape[0], 500 + i, -0.2f, 0.2f);
        for (int64_t j = 0; j < v.shape[0]; j++) p[j] += noise[j];
        free(noise);
    }
    enum { B = 4, S = 12, T = 10, EB = 3, ES = 11, ET = 8 };
    int64_t src[B * S], tin[B * T], tout[B * T];
    train_setup t = {m, opt, 1.0f, 0.1f, 0};
    for (int k = 0; ok && k < 3; k++) {
        float loss, gn;
        attn_run run = {1, 77, (uint64_t)k << 16, 0};
        make_batch(3000 + k, B, S, T, cfg.src_vocab, cfg.tgt_vocab, src, tin, tout);
        ok = train_step(ctx, &t, src, tin, tout, B, S, T, cfg.tgt_vocab, &run, 1e-3f, &loss, &gn);
    }
    int64_t esrc[EB * ES], etgt[EB * ET], ss[2] = {EB, ES}, ts[2] = {EB, ET}, ls[3] = {EB, ET, 21};
    float lg[EB * ET * 21];
    make_batch(4000, EB, ES, ET, cfg.src_vocab, cfg.tgt_vocab, esrc, etgt, NULL);
    attn_tensor Src = attn_tensor_make(esrc, ATTN_I64, 2, ss), Tgt = attn_tensor_make(etgt, ATTN_I64, 2, ts);
    attn_tensor Lg = attn_view3(lg, EB, ET, 21);
    ok = ok && TU_STATUS(attn_seq2seq_forward(ctx, m, &Src, &Tgt, NULL, &Lg, NULL), ATTN_OK, ctx) &&
         TU_STATUS(attn_st_writer_create(ctx, &w), ATTN_OK, ctx) &&
         TU_STATUS(attn_module_save(ctx, m, w, NULL), ATTN_OK, ctx) &&
         TU_STATUS(attn_st_writer_add(w, "batch.src", ATTN_I64, 2, ss, esrc), ATTN_OK, ctx) &&
         TU_STATUS(attn_st_writer_add(w, "batch.tgt", ATTN_I64, 2, ts, etgt), ATTN_OK, ctx) &&
         TU_STATUS(attn_st_writer_add(w, "expected.logits", ATTN_F32, 3, ls, lg), ATTN_OK, ctx);
    if (ok) {
        put_cfg(w, &cfg);
        attn_st_writer_meta(w, "written_by", "attn " ATTN_VERSION_STRING
                            " test_training --write-attn-checkpoint");
        ok = TU_STATUS(attn_st_writer_save(w, path), ATTN_OK, ctx);
    }
    if (ok) printf("wrote %s\n", path);
    attn_st_writer_free(w);
    attn_adamw_free(opt);
    attn_module_free(m);
    return ok;
}

/* ---- (d) determinism ------------------------------------------------------------------------- */
/* 3 steps with dropout 0.1 from the trajectory's initial weights on a larger batch (so that
 * the matrix products are split among threads). */
/* the dropout runs' batch: 32 sequences, 8 under ATTN_TEST_QUICK (an emulator) */
static int64_t dropout_batch(void) { return tu_quick(NULL) ? 8 : 32; }

static int dropout_run(int threads, float *losses, float **weights, size_t *numel,
                       float *eval_loss) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c;
    attn_st *st = NULL;
    attn_module *m = NULL;
    attn_adamw *opt = NULL;
    attn_seq2seq_config cfg;
    if (!TU_STATUS(attn_ctx_create(&p, &c), ATTN_OK, ctx)) return 0;
    int ok = TU_STATUS(attn_st_read_file(c, DIR "trajectory.safetensors", &st), ATTN_OK, c) &&
             cfg_from_meta(st, &cfg);
    cfg.tf.dropout = 0.1f;
    ok = ok && TU_STATUS(attn_seq2seq_create(c, &cfg, &m), ATTN_OK, c) &&
         TU_STATUS(attn_module_load(c, m, st, NULL, 1), ATTN_OK, c) &&
         TU_STATUS(attn_module_enable_grad(c, m), ATTN_OK, c) &&
         TU_STATUS(attn_adamw_create(c, m, NULL, &opt), ATTN_OK, c);
    enum { BMAX = 32, S = 16, T = 15 };
    static int64_t src[BMAX * S], tin[BMAX * T], tout[BMAX * T];
    const int64_t B = dropout_batch(); /* 32, or 8 under ATTN_TEST_QUICK (an emulator) */
    train_setup t = {m, opt, 1.0f, 0.1f, 0};
    for (int k = 0; ok && k < 3; k++) {
        float gn;
        attn_run run = {1, 5, (uint64_t)k << 16, 0};
        make_batch(6000 + k, B, S, T, cfg.src_vocab, cfg.tgt_vocab, src, tin, tout);
        if (k == 0) { /* the same batch without dropout: the loss must differ */
            int64_t ss[2] = {B, S}, ts[2] = {B, T}, tn[1] = {B * T};
            float *lg = malloc((size_t)B * T * (size_t)cfg.tgt_vocab * sizeof(float));
            attn_tensor Src = attn_tensor_make(src, ATTN_I64, 2, ss), Tin = attn_tensor_make(tin, ATTN_I64, 2, ts);
            attn_tensor Tout = attn_tensor_make(tout, ATTN_I64, 1, tn);
            attn_tensor Lg = attn_view3(lg, B, T, cfg.tgt_vocab), Lg2 = attn_view2(lg, B * T, cfg.tgt_vocab);
            ok = TU_STATUS(attn_seq2seq_forward(c, m, &Src, &Tin, NULL, &Lg, NULL), ATTN_OK, c) &&
                 TU_STATUS(attn_cross_entropy(c, &Lg2, &Tout, 0, 0.1f, eval_loss, NULL), ATTN_OK, c);
            free(lg);
        }
        ok = ok && train_step(c, &t, src, tin, tout, B, S, T, cfg.tgt_vocab, &run, 1e-3f,
                              &losses[k], &gn);
    }
    if (ok) *weights = snapshot(m), *numel = (size_t)attn_module_numel(m);
    attn_adamw_free(opt);
    attn_module_free(m);
    attn_st_free(st);
    attn_ctx_free(c);
    return ok;
}

static void test_dropout_threads(void) {
    float l1[3], l2[3], e1, e2, *w1 = NULL, *w2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (dropout_run(1, l1, &w1, &n1, &e1) && dropout_run(2, l2, &w2, &n2, &e2)) {
        int same_l = memcmp(l1, l2, sizeof l1) == 0;
        int same_w = n1 == n2 && memcmp(w1, w2, n1 * sizeof(float)) == 0;
        TU_CHECK(same_l, "dropout training: losses differ between 1 and 2 threads "
                 "(%.9g %.9g %.9g vs %.9g %.9g %.9g)", l1[0], l1[1], l1[2], l2[0], l2[1], l2[2]);
        TU_CHECK(same_w, "dropout training: weights differ between 1 and 2 threads");
        TU_CHECK(l1[0] != e1, "dropout had no effect on the loss");
        printf("determinism: 3 steps of dropout-0.1 training (B=%lld), 1 vs 2 threads: losses "
               "%s, %zu weights %s (losses %.6f %.6f %.6f; step 1 without dropout %.6f)\n",
               (long long)dropout_batch(), same_l ? "bit-identical" : "DIFFER", n1,
               same_w ? "bit-identical" : "DIFFER",
               l1[0], l1[1], l1[2], e1);
    }
    free(w1);
    free(w2);
}

typedef struct progress_log {
    float loss[16];
    int64_t first, last; /* steps seen */
    int64_t stop_at;     /* return 1 after this step (0: never) */
} progress_log;

static int on_progress(void *user, const attn_train_progress *p) {
    progress_log *g = user;
    if (g->first == 0) g->first = p->step;
    g->last = p->step;
    if (p->step >= 1 && p->step <= 16) g->loss[p->step - 1] = p->loss;
    return g->stop_at > 0 && p->step >= g->stop_at;
}

static int dates_run(int threads, const attn_dates_config *cfg, const char *resume,
                     progress_log *g, float **weights, int64_t *numel) {
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.threads = threads;
    attn_ctx *c;
    attn_module *m = NULL;
    if (!TU_STATUS(attn_ctx_create(&p, &c), ATTN_OK, ctx)) return 0;
    int ok = TU_STATUS(attn_dates_train(c, cfg, resume, on_progress, g, &m), ATTN_OK, c);
    if (ok && weights) *weights = snapshot(m), *numel = attn_module_numel(m);
    attn_module_free(m);
    attn_ctx_free(c);
    return ok;
}

static void test_dates_determinism(void) {
    const char *state = "test_training.tmp.state.safetensors";
    attn_dates_config cfg = attn_dates_defaults();
    cfg.d_model = 16, cfg.nhead = 2, cfg.num_layers = 1, cfg.dim_feedforward = 32;
    cfg.batch = 8, cfg.steps = 5, cfg.warmup = 2, cfg.eval_n = 0, cfg.dropout = 0.1f;
    cfg.seed = 11;
    progress_log a, b, r1, r2;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&r1, 0, sizeof r1),
        memset(&r2, 0, sizeof r2);
    float *wa = NULL, *wb = NULL, *wr = NULL;
    int64_t na = 0, nb = 0, nr = 0;
    if (!dates_run(1, &cfg, NULL, &a, &wa, &na) || !dates_run(2, &cfg, NULL, &b, &wb, &nb)) goto out;
    int same_l = a.last == 5 && b.last == 5 && memcmp(a.loss, b.loss, 5 * sizeof(float)) == 0;
    int same_w = na == nb && memcmp(wa, wb, (size_t)na * sizeof(float)) == 0;
    TU_CHECK(same_l, "attn_dates_train: losses differ between 1 and 2 threads");
    TU_CHECK(same_w, "attn_dates_train: weights differ between 1 and 2 threads");
    /* interrupted after step 3 (state written there), then resumed to step 5 */
    attn_dates_config c1 = cfg;
    c1.state_path = state, c1.save_every = 3;
    r1.stop_at = 3;
    remove(state);
    if (!dates_run(1, &c1, NULL, &r1, NULL, NULL)) goto out;
    TU_CHECK(r1.last == 3, "the interrupted run stopped at step %lld", (long long)r1.last);
    if (!dates_run(2, &cfg, state, &r2, &wr, &nr)) goto out;
    int same_r = r2.first == 4 && r2.last == 5 && memcmp(a.loss, r1.loss, 3 * sizeof(float)) == 0 &&
                 memcmp(a.loss + 3, r2.loss + 3, 2 * sizeof(float)) == 0;
    int same_rw = nr == na && memcmp(wa, wr, (size_t)na * sizeof(float)) == 0;
    TU_CHECK(same_r, "resumed dates run: steps %lld..%lld, losses %.9g %.9g vs %.9g %.9g",
             (long long)r2.first, (long long)r2.last, r2.loss[3], r2.loss[4], a.loss[3], a.loss[4]);
    TU_CHECK(same_rw, "resumed dates run: final weights differ from the uninterrupted run");
    printf("determinism: attn_dates_train (d_model 16, 5 steps, dropout 0.1) 1 vs 2 threads: "
           "losses %s, weights %s; resumed from step 3 (2 threads): losses 4-5 %s, weights %s "
           "(losses %.6f %.6f %.6f %.6f %.6f)\n",
           same_l ? "bit-identical" : "DIFFER", same_w ? "bit-identical" : "DIFFER",
           same_r ? "bit-identical" : "DIFFER", same_rw ? "bit-identical" : "DIFFER", a.loss[0],
           a.loss[1], a.loss[2], a.loss[3], a.loss[4]);
out:
    remove(state);
    free(wa), free(wb), free(wr);
}

/* ---- (e) dropout statistics at module level ----------------------------------------------- */
/* w_1 = 0, w_1.bias = 1, ReLU: every hidden unit is 1 before dropout; w_2 = I, w_2.bias = 0:
 * the output shows the hidden units, each 0 or 1/(1-p). */
static void test_ffn_dropout_rate(void) {
    enum { E = 64, N = 4096 };
    const float p = 0.3f;
    attn_transformer_config tc = attn_transformer_defaults(E, 1);
    tc.dim_feedforward = E, tc.dropout = p, tc.activation = ATTN_ACT_RELU;
    attn_module *m;
    if (!TU_STATUS(attn_ffn_create(ctx, &tc, &m), ATTN_OK, ctx)) return;
    attn_tensor w1, b1, w2, b2;
    attn_module_param(ctx, m, "w_1.weight", &w1);
    attn_module_param(ctx, m, "w_1.bias", &b1);
    attn_module_param(ctx, m, "w_2.weight", &w2);
    attn_module_param(ctx, m, "w_2.bias", &b2);
    memset(w1.data, 0, E * E * sizeof(float));
    memset(w2.data, 0, E * E * sizeof(float));
    memset(b2.data, 0, E * sizeof(float));
    for (int i = 0; i < E; i++) ((float *)b1.data)[i] = 1.0f, ((float *)w2.data)[i * E + i] = 1.0f;
    float *x = calloc((size_t)N * E, sizeof(float)), *y = malloc((size_t)N * E * sizeof(float));
    attn_tensor X = attn_view2(x, N, E), Y = attn_view2(y, N, E);
    attn_run run = {1, 12345, 0, 0};
    if (TU_STATUS(attn_ffn_forward(ctx, m, &X, &run, &Y), ATTN_OK, ctx)) {
        long zeros = 0, col[E] = {0}, bad = 0;
        const float kept = 1.0f / (1.0f - p);
        for (long i = 0; i < (long)N * E; i++) {
            if (y[i] == 0.0f) zeros++, col[i % E]++;
            else if (fabsf(y[i] - kept) > 1e-6f * kept) bad++;
        }
        double n = (double)N * E, rate = zeros / n, sigma = sqrt(p * (1 - p) / n);
        double sc = sqrt(p * (1 - p) / N), worst = 0;
        for (int j = 0; j < E; j++) {
            double d = fabs(col[j] / (double)N - p) / sc;
            if (d > worst) worst = d;
        }
        TU_CHECK(bad == 0, "%ld kept hidden units are not 1/(1-p)", bad);
        TU_CHECK(fabs(rate - p) <= 5 * sigma, "zeroed fraction %.5f, expected %.2f +- %.5f (5 sigma)",
                 rate, (double)p, 5 * sigma);
        TU_CHECK(worst <= 5, "a hidden unit's zeroed fraction is %.2f sigma from p", worst);
        printf("ffn dropout p=%.1f: zeroed fraction %.5f of %.0f hidden units (%.2f sigma), "
               "worst unit %.2f sigma\n", (double)p, rate, n, fabs(rate - p) / sigma, worst);
    }
    free(x), free(y);
    attn_module_free(m);
}

int main(int argc, char **argv) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    if (argc == 3 && strcmp(argv[1], "--write-attn-checkpoint") == 0) {
        int ok = write_attn_checkpoint(argv[2]);
        attn_ctx_free(ctx);
        return ok ? 0 : 1;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_training [--write-attn-checkpoint PATH]\n");
        attn_ctx_free(ctx);
        return 2;
    }
    test_trajectory();
    test_adamw_alone();
    check_checkpoint(DIR "seq2seq_pt.safetensors", "PyTorch -> attn (seq2seq_pt)");
    check_checkpoint(DIR "seq2seq_attn.safetensors", "attn -> PyTorch (seq2seq_attn, re-checked)");
    test_dropout_threads();
    test_dates_determinism();
    test_ffn_dropout_rate();
    attn_ctx_free(ctx);
    return tu_finish("test_training");
}
