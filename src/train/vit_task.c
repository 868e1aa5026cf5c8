/* Task vit (attn_vit_train, attn_tasks.h): a Vision Transformer on square grayscale images
 * (Fashion-MNIST), as a task of the one training loop (loop.c), with its model files.
 *
 * A run is a function of its config alone (not of the thread count): the order of epoch e is
 * attn_images_shuffle(seed, e), the augmentation of an image in epoch e is attn_images_batch's
 * stream e, step g's dropout is offset g << 16 of the seed's stream, so a run resumed from any
 * checkpoint (inside an epoch too) continues exactly as the uninterrupted one.
 *
 * Checkpoints: the loop's (model, optimiser, step, settings) plus the model's config and the
 * run's log (per step and per epoch: "log.step_loss", "log.epochs", epochs_done, steps_done,
 * elapsed_s).  The model file after each epoch: the parameters under their state_dict names,
 * the config in the metadata (task "vit"). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_tasks.h"
#include "train_util.h"

static const char *const log_names[ATTN_VIT_LOG_COLS] = {
    "train_loss", "test_loss", "test_accuracy", "lr", "train_images_per_s", "eval_images_per_s",
    "elapsed_s"};

const char *attn_vit_log_name(int col) {
    return col >= 0 && col < ATTN_VIT_LOG_COLS ? log_names[col] : NULL;
}

attn_vit_train_config attn_vit_train_defaults(void) {
    attn_vit_train_config c;
    memset(&c, 0, sizeof c);
    c.patch = 7, c.d_model = 96, c.nhead = 4, c.num_layers = 4, c.dim_feedforward = 192;
    c.num_classes = 10, c.dropout = 0.0f;
    c.pixel_mean = ATTN_FASHION_MEAN, c.pixel_std = ATTN_FASHION_STD;
    c.epochs = 20, c.batch = 128, c.warmup = 200;
    c.lr = 2e-3f, c.weight_decay = 0.05f, c.clip = 1.0f, c.label_smoothing = 0.0f;
    c.seed = 1, c.augment = 1, c.pad = 1, c.eval_batch = 256, c.accum = 1;
    return c;
}

attn_vit_config attn_vit_train_model_config(const attn_vit_train_config *t, int64_t image) {
    attn_vit_config c;
    memset(&c, 0, sizeof c);
    c.tf = attn_transformer_defaults(t->d_model, t->nhead);
    c.tf.dim_feedforward = t->dim_feedforward;
    c.tf.dropout = t->dropout;
    c.tf.activation = ATTN_ACT_GELU;
    c.tf.layer_norm_eps = 1e-6f;
    c.tf.norm_first = 1;
    c.tf.bias = 1;
    c.tf.num_encoder_layers = t->num_layers;
    c.image_size = image;
    c.channels = 1;
    c.patch = t->patch;
    c.num_classes = t->num_classes;
    return c;
}

/* ---- the model file's metadata ----------------------------------------------------------- */
static attn_status put_meta(attn_st_writer *w, const attn_vit_model_info *vm) {
    const attn_vit_config *c = &vm->cfg;
    attn_status st = attn_st_writer_meta(w, "task", "vit");
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "model", "vit");
    if (st == ATTN_OK) st = attn__meta_put_i(w, "image_size", c->image_size);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "channels", c->channels);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "patch", c->patch);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "num_classes", c->num_classes);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "d_model", c->tf.d_model);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "nhead", c->tf.nhead);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "num_layers", c->tf.num_encoder_layers);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "dim_feedforward", c->tf.dim_feedforward);
    if (st == ATTN_OK) st = attn__meta_put_f(w, "dropout", c->tf.dropout);
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "activation", "gelu");
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "norm_first", "true");
    if (st == ATTN_OK) st = attn__meta_put_f(w, "layer_norm_eps", c->tf.layer_norm_eps);
    if (st == ATTN_OK) st = attn__meta_put_f(w, "pixel_mean", vm->pixel_mean);
    if (st == ATTN_OK) st = attn__meta_put_f(w, "pixel_std", vm->pixel_std);
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "classes", "fashion-mnist");
    return st;
}

/* Metadata k as an integer in [lo, hi] (ATTN_E_FORMAT naming it otherwise). */
static attn_status get_i(attn_ctx *ctx, const char *name, const attn_st *st, const char *k,
                         long long lo, long long hi, int64_t *v) {
    const char *s = attn_st_meta(st, k);
    ATTN_FAIL_IF(!s, ctx, ATTN_E_FORMAT, "%s: the metadata has no \"%s\"", name, k);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    ATTN_FAIL_IF(errno || *end || end == s || x < lo || x > hi, ctx, ATTN_E_FORMAT,
                 "%s: metadata \"%s\" = \"%.40s\" is not an integer in [%lld, %lld]", name, k, s,
                 lo, hi);
    *v = x;
    return ATTN_OK;
}

static attn_status get_f(attn_ctx *ctx, const char *name, const attn_st *st, const char *k,
                         double lo, double hi, float *v) {
    const char *s = attn_st_meta(st, k);
    ATTN_FAIL_IF(!s, ctx, ATTN_E_FORMAT, "%s: the metadata has no \"%s\"", name, k);
    char *end;
    double x = strtod(s, &end);
    ATTN_FAIL_IF(*end || end == s || !(x >= lo && x <= hi), ctx, ATTN_E_FORMAT,
                 "%s: metadata \"%s\" = \"%.40s\" is not a number in [%g, %g]", name, k, s, lo,
                 hi);
    *v = (float)x;
    return ATTN_OK;
}

/* The tensor prefix + tname must be there with this shape (ndim <= 3). */
static attn_status want_tensor(attn_ctx *ctx, const char *name, const attn_st *st,
                               const char *prefix, const char *tname, int ndim,
                               const int64_t *shape) {
    char full[256];
    attn_st_tensor t;
    snprintf(full, sizeof full, "%s%s", prefix, tname);
    ATTN_FAIL_IF(attn_st_find(st, full, &t) != ATTN_OK, ctx, ATTN_E_FORMAT,
                 "%s: the tensor \"%s\" is missing", name, full);
    int ok = t.ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t.shape[i] == shape[i];
    if (!ok) {
        char a[96] = "", b[96] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? ", " : "",
                     (long long)shape[i]);
        for (int i = 0; i < t.ndim && i < 8; i++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? ", " : "",
                     (long long)t.shape[i]);
        return attn__fail(ctx, ATTN_E_FORMAT,
                          "%s: the tensor \"%s\" is [%s], the config in the metadata says [%s]",
                          name, full, b, a);
    }
    return ATTN_OK;
}

attn_status attn_vit_model_read(attn_ctx *ctx, const attn_st *st, const char *name,
                                attn_vit_model_info *vm) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!st || !vm, ctx, ATTN_E_INVALID, "attn_vit_model_read: st or info is NULL");
    if (!name) name = "the model";
    memset(vm, 0, sizeof *vm);
    attn_st_tensor t0;
    const char *prefix = attn_st_find(st, "model.head.weight", &t0) == ATTN_OK ? "model." : "";
    const char *task = attn_st_meta(st, "task");
    ATTN_FAIL_IF(!task, ctx, ATTN_E_FORMAT,
                 "%s: not a checkpoint of 'attn train vit' (its metadata has no \"task\")", name);
    if (strcmp(task, "vit") != 0) {
        ATTN_FAIL_IF(!strcmp(task, "dates") || !strcmp(task, "charlm"), ctx, ATTN_E_FORMAT,
                     "%s: a checkpoint of 'attn train %s', not of 'attn train vit'", name, task);
        return attn__fail(ctx, ATTN_E_FORMAT,
                          "%s: not a checkpoint of 'attn train vit' (metadata task = %.60s)", name,
                          task);
    }
    int64_t img = 0, ch = 0, patch = 0, K = 0, E = 0, H = 0, NL = 0, F = 0;
    float drop = 0, eps = 0, mean = 0, std = 0;
    long long max_layers = (long long)attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
    ATTN_TRY(get_i(ctx, name, st, "image_size", 1, 65536, &img));
    ATTN_TRY(get_i(ctx, name, st, "channels", 1, 1, &ch));
    ATTN_TRY(get_i(ctx, name, st, "patch", 1, img, &patch));
    ATTN_TRY(get_i(ctx, name, st, "num_classes", 1, 65536, &K));
    ATTN_TRY(get_i(ctx, name, st, "d_model", 1, 65536, &E));
    ATTN_TRY(get_i(ctx, name, st, "nhead", 1, E, &H));
    ATTN_TRY(get_i(ctx, name, st, "num_layers", 1, max_layers, &NL));
    ATTN_TRY(get_i(ctx, name, st, "dim_feedforward", 1, 1 << 20, &F));
    ATTN_TRY(get_f(ctx, name, st, "dropout", 0, 0.99, &drop));
    ATTN_TRY(get_f(ctx, name, st, "layer_norm_eps", 1e-30, 1, &eps));
    ATTN_TRY(get_f(ctx, name, st, "pixel_mean", -1e6, 1e6, &mean));
    ATTN_TRY(get_f(ctx, name, st, "pixel_std", 1e-6, 1e6, &std));
    const char *act = attn_st_meta(st, "activation"), *nf = attn_st_meta(st, "norm_first");
    ATTN_FAIL_IF(!act || strcmp(act, "gelu") != 0 || !nf || strcmp(nf, "true") != 0, ctx,
                 ATTN_E_FORMAT, "%s: only pre-norm GELU models are supported (metadata "
                                "activation, norm_first)", name);
    ATTN_FAIL_IF(img % patch != 0, ctx, ATTN_E_FORMAT,
                 "%s: patch %lld does not divide image_size %lld", name, (long long)patch,
                 (long long)img);
    ATTN_FAIL_IF(E % H != 0, ctx, ATTN_E_FORMAT, "%s: nhead %lld does not divide d_model %lld",
                 name, (long long)H, (long long)E);
    int64_t G = img / patch, N = G * G;
    int64_t s_proj[2] = {E, ch * patch * patch}, s_pos[3] = {1, N + 1, E}, s_head[2] = {K, E},
            s_lin[2] = {F, E};
    ATTN_TRY(want_tensor(ctx, name, st, prefix, "embed.proj.weight", 2, s_proj));
    ATTN_TRY(want_tensor(ctx, name, st, prefix, "embed.pos_embed", 3, s_pos));
    ATTN_TRY(want_tensor(ctx, name, st, prefix, "head.weight", 2, s_head));
    for (int64_t i = 0; i < NL; i++) {
        char tn[64];
        snprintf(tn, sizeof tn, "layers.%lld.linear1.weight", (long long)i);
        ATTN_TRY(want_tensor(ctx, name, st, prefix, tn, 2, s_lin));
    }
    {
        char tn[96];
        attn_st_tensor t;
        snprintf(tn, sizeof tn, "%slayers.%lld.linear1.weight", prefix, (long long)NL);
        ATTN_FAIL_IF(attn_st_find(st, tn, &t) == ATTN_OK, ctx, ATTN_E_FORMAT,
                     "%s: the file holds more layers than num_layers = %lld", name,
                     (long long)NL);
    }
    attn_vit_train_config tc = attn_vit_train_defaults();
    tc.patch = patch, tc.d_model = E, tc.nhead = H, tc.dim_feedforward = F, tc.num_layers = NL;
    tc.dropout = drop, tc.num_classes = K;
    vm->cfg = attn_vit_train_model_config(&tc, img);
    vm->cfg.tf.layer_norm_eps = eps;
    vm->pixel_mean = mean, vm->pixel_std = std;
    snprintf(vm->prefix, sizeof vm->prefix, "%s", prefix);
    return ATTN_OK;
}

attn_status attn_vit_model_load(attn_ctx *ctx, const attn_st *st, const char *name,
                                attn_vit_model_info *info, attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model, ctx, ATTN_E_INVALID, "attn_vit_model_load: model is NULL");
    *model = NULL;
    ATTN_TRY(attn_vit_model_read(ctx, st, name, info));
    attn_module *m = NULL;
    attn_status s = attn_vit_create(ctx, &info->cfg, &m);
    if (s == ATTN_OK) s = attn_module_load(ctx, m, st, info->prefix, 1);
    if (s != ATTN_OK) {
        attn_module_free(m);
        return s;
    }
    *model = m;
    return ATTN_OK;
}

attn_status attn_vit_model_save(attn_ctx *ctx, const attn_module *m,
                                const attn_vit_model_info *vm, const char *path) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !vm || !path, ctx, ATTN_E_INVALID, "attn_vit_model_save: NULL argument");
    attn_st_writer *w;
    attn_status st = attn_st_writer_create(ctx, &w);
    if (st != ATTN_OK) return st;
    st = put_meta(w, vm);
    if (st == ATTN_OK) st = attn_module_save(ctx, m, w, NULL);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

attn_status attn_vit_classify(attn_ctx *ctx, const attn_module *m, const attn_vit_config *vc,
                              const float *image, float *logits, double *p) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !vc || !image || !p, ctx, ATTN_E_INVALID,
                 "attn_vit_classify: NULL argument");
    const int64_t R = vc->image_size, K = vc->num_classes;
    ATTN_FAIL_IF(K < 1 || K > 65536 || R < 1 || R > 65536, ctx, ATTN_E_INVALID,
                 "attn_vit_classify: %lld classes, images of %lld", (long long)K, (long long)R);
    float *lg = logits ? logits : attn__malloc(ctx, (size_t)K * sizeof(float));
    ATTN_FAIL_IF(!lg, ctx, ATTN_E_NOMEM, "attn_vit_classify: out of memory");
    attn_tensor X = attn_view4((float *)image, 1, 1, R, R), L = attn_view2(lg, 1, K);
    attn_status st = attn_vit_forward(ctx, m, &X, NULL, &L);
    if (st == ATTN_OK) {
        double mx = lg[0], sum = 0;
        for (int64_t k = 1; k < K; k++) mx = lg[k] > mx ? lg[k] : mx;
        for (int64_t k = 0; k < K; k++) sum += p[k] = exp((double)lg[k] - mx);
        for (int64_t k = 0; k < K; k++) p[k] /= sum;
    }
    if (!logits) attn__free(ctx, lg);
    return st;
}

/* ---- attention maps (attn attention-map) ------------------------------------------------- */
/* The head-averaged attention matrices [NL, L, L] of every layer for one image, through the
 * layers' own modules (attn_vit_attention gives only the [CLS] rows): the embedding
 * (attn_vit_embed), then per layer the self-attention of norm1(x) (attn_mha_forward with its
 * weights averaged over the heads) and the whole layer (attn_encoder_layer_forward). */
attn_status attn_vit_attention_layers(attn_ctx *ctx, const attn_st *wst,
                                      const attn_vit_model_info *info, const float *img,
                                      float *W) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!wst || !info || !img || !W, ctx, ATTN_E_INVALID,
                 "attn_vit_attention_layers: NULL argument");
    const attn_vit_config *c = &info->cfg;
    ATTN_FAIL_IF(c->patch < 1 || c->image_size < 1 || c->image_size > 65536 ||
                     c->image_size % c->patch != 0 || c->tf.d_model < 1 ||
                     c->tf.d_model > 65536 || c->tf.num_encoder_layers < 1,
                 ctx, ATTN_E_INVALID, "attn_vit_attention_layers: not a config of "
                 "attn_vit_model_read");
    int64_t p = c->patch, G = c->image_size / p, N = G * G, L = N + 1, P = p * p,
            E = c->tf.d_model, NL = c->tf.num_encoder_layers;
    attn_module *emb = NULL, *layer = NULL, *mha = NULL;
    float *pt = malloc((size_t)(N * P) * sizeof(float)),
          *x = malloc((size_t)(L * E) * sizeof(float)),
          *x2 = malloc((size_t)(L * E) * sizeof(float)),
          *nx = malloc((size_t)(L * E) * sizeof(float)),
          *o = malloc((size_t)(L * E) * sizeof(float));
    attn_status st = ATTN_E_NOMEM;
    if (!pt || !x || !x2 || !nx || !o) goto done;
    /* patchify: patch py*G + px, its pixels row by row */
    for (int64_t py = 0; py < G; py++)
        for (int64_t px = 0; px < G; px++)
            for (int64_t dy = 0; dy < p; dy++)
                for (int64_t dx = 0; dx < p; dx++)
                    pt[(py * G + px) * P + dy * p + dx] =
                        img[(py * p + dy) * c->image_size + px * p + dx];
    char pre[128];
    snprintf(pre, sizeof pre, "%sembed.", info->prefix);
    if ((st = attn_vit_embed_create(ctx, P, E, N, &emb)) != ATTN_OK ||
        (st = attn_module_load(ctx, emb, wst, pre, 1)) != ATTN_OK)
        goto done;
    attn_tensor Pt = attn_view3(pt, 1, N, P), X = attn_view3(x, 1, L, E);
    if ((st = attn_vit_embed_forward(ctx, emb, &Pt, &X)) != ATTN_OK) goto done;
    attn_mha_config mc = attn_mha_defaults(E, c->tf.nhead);
    mc.dropout = 0;
    for (int64_t i = 0; i < NL; i++) {
        attn_module_free(layer), attn_module_free(mha);
        layer = mha = NULL;
        snprintf(pre, sizeof pre, "%slayers.%lld.", info->prefix, (long long)i);
        if ((st = attn_encoder_layer_create(ctx, &c->tf, &layer)) != ATTN_OK ||
            (st = attn_module_load(ctx, layer, wst, pre, 1)) != ATTN_OK)
            goto done;
        snprintf(pre, sizeof pre, "%slayers.%lld.self_attn.", info->prefix, (long long)i);
        if ((st = attn_mha_create(ctx, &mc, &mha)) != ATTN_OK ||
            (st = attn_module_load(ctx, mha, wst, pre, 1)) != ATTN_OK)
            goto done;
        attn_tensor nw, nb, NX = attn_view3(nx, 1, L, E), O = attn_view3(o, 1, L, E),
                            Wi = attn_view3(W + i * L * L, 1, L, L), X2 = attn_view3(x2, 1, L, E);
        if ((st = attn_module_param(ctx, layer, "norm1.weight", &nw)) != ATTN_OK ||
            (st = attn_module_param(ctx, layer, "norm1.bias", &nb)) != ATTN_OK ||
            (st = attn_layer_norm(ctx, &X, &nw, &nb, c->tf.layer_norm_eps, &NX)) != ATTN_OK)
            goto done;
        attn_mha_options mo = {1, 1, 0};
        if ((st = attn_mha_forward(ctx, mha, &NX, &NX, &NX, NULL, NULL, &mo, NULL, &O, &Wi)) !=
                ATTN_OK ||
            (st = attn_encoder_layer_forward(ctx, layer, &X, NULL, NULL, &X2)) != ATTN_OK)
            goto done;
        memcpy(x, x2, (size_t)(L * E) * sizeof(float));
    }
done:
    if (st == ATTN_E_NOMEM && !(pt && x && x2 && nx && o))
        attn__fail(ctx, st, "attn_vit_attention_layers: out of memory");
    attn_module_free(emb), attn_module_free(layer), attn_module_free(mha);
    free(pt), free(x), free(x2), free(nx), free(o);
    return st;
}

/* Attention rollout (Abnar & Zuidema 2020): per layer A = W + I with its rows renormalised,
 * multiplied through the layers (the last on the left); roll [N] receives the [CLS] row over
 * the patches.  W [NL, L, L]. */
attn_status attn_vit_attention_rollout(attn_ctx *ctx, const float *W, int64_t NL, int64_t L,
                                       float *roll) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!W || !roll || NL < 1 || L < 2 || L > (1 << 20), ctx, ATTN_E_INVALID,
                 "attn_vit_attention_rollout: NULL argument or %lld layers of %lld tokens",
                 (long long)NL, (long long)L);
    size_t LL;
    ATTN_FAIL_IF(!attn__mul_size((size_t)L, (size_t)L, &LL) || LL > SIZE_MAX / sizeof(double),
                 ctx, ATTN_E_INVALID, "attn_vit_attention_rollout: %lld tokens", (long long)L);
    double *Rm = malloc((size_t)(L * L) * sizeof(double)),
           *A = malloc((size_t)(L * L) * sizeof(double)),
           *T = malloc((size_t)(L * L) * sizeof(double));
    if (!Rm || !A || !T) {
        free(Rm), free(A), free(T);
        return attn__fail(ctx, ATTN_E_NOMEM, "attn_vit_attention_rollout: out of memory");
    }
    for (int64_t i = 0; i < L * L; i++) Rm[i] = i / L == i % L;
    for (int64_t l = 0; l < NL; l++) {
        for (int64_t i = 0; i < L; i++) {
            double s = 0;
            for (int64_t j = 0; j < L; j++)
                s += A[i * L + j] = (double)W[(l * L + i) * L + j] + (i == j);
            for (int64_t j = 0; j < L; j++) A[i * L + j] /= s;
        }
        for (int64_t i = 0; i < L; i++) /* T = A Rm */
            for (int64_t j = 0; j < L; j++) {
                double s = 0;
                for (int64_t k = 0; k < L; k++) s += A[i * L + k] * Rm[k * L + j];
                T[i * L + j] = s;
            }
        double *sw = Rm;
        Rm = T, T = sw;
    }
    for (int64_t j = 1; j < L; j++) roll[j - 1] = (float)Rm[j];
    free(Rm), free(A), free(T);
    return ATTN_OK;
}

/* ---- evaluation -------------------------------------------------------------------------- */
/* Mean loss and accuracy on a whole set, in batches of eb (buffers x [eb, R, C], lg [eb, K],
 * y [eb], idx [eb]); eval mode (no dropout). */
static attn_status evaluate(attn_ctx *ctx, const attn_module *m, const attn_images *s,
                            int64_t K, float mean, float std, int64_t eb, float *x, float *lg,
                            int64_t *y, int64_t *idx, double *loss, double *acc) {
    int64_t R = s->rows, right = 0;
    double sum = 0;
    for (int64_t i0 = 0; i0 < s->n; i0 += eb) {
        int64_t b = s->n - i0 < eb ? s->n - i0 : eb;
        for (int64_t i = 0; i < b; i++) idx[i] = i0 + i;
        ATTN_TRY(attn_images_batch(ctx, s, idx, b, NULL, 0, 0, mean, std, x, y));
        attn_tensor X = attn_view4(x, b, 1, R, R), L = attn_view2(lg, b, K);
        int64_t ts[1] = {b};
        attn_tensor Y = attn_tensor_make(y, ATTN_I64, 1, ts);
        float l;
        ATTN_TRY(attn_vit_forward(ctx, m, &X, NULL, &L));
        ATTN_TRY(attn_cross_entropy(ctx, &L, &Y, -100, 0.0f, &l, NULL));
        sum += (double)l * (double)b;
        for (int64_t i = 0; i < b; i++) {
            const float *r = lg + i * K;
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (r[k] > r[best]) best = k;
            right += best == y[i];
        }
    }
    *loss = s->n ? sum / (double)s->n : 0.0;
    *acc = s->n ? (double)right / (double)s->n : 0.0;
    return ATTN_OK;
}

/* Labels present and below K, rows x cols within the set's bounds. */
static attn_status set_ok(attn_ctx *ctx, const attn_images *s, const char *what) {
    ATTN_FAIL_IF(!s || s->n < 1 || !s->pixels || s->rows < 1 || s->cols < 1 ||
                     s->rows > 65536 || s->cols > 65536,
                 ctx, ATTN_E_INVALID, "attn_vit_train: the %s set is empty or malformed", what);
    return ATTN_OK;
}

attn_status attn_vit_evaluate(attn_ctx *ctx, const attn_module *m, const attn_vit_config *vc,
                              const attn_images *s, float mean, float std, int64_t eb,
                              double *loss, double *acc) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !vc || !s || !loss || !acc, ctx, ATTN_E_INVALID,
                 "attn_vit_evaluate: NULL argument");
    ATTN_TRY(set_ok(ctx, s, "evaluation"));
    ATTN_FAIL_IF(!s->labels, ctx, ATTN_E_INVALID, "attn_vit_evaluate: the set has no labels");
    ATTN_FAIL_IF(s->rows != vc->image_size || s->cols != vc->image_size, ctx, ATTN_E_INVALID,
                 "attn_vit_evaluate: the images are %lldx%lld pixels; the model takes %lldx%lld",
                 (long long)s->cols, (long long)s->rows, (long long)vc->image_size,
                 (long long)vc->image_size);
    ATTN_FAIL_IF(eb < 1 || eb > 65536, ctx, ATTN_E_INVALID,
                 "attn_vit_evaluate: eb must be 1..65536, got %lld", (long long)eb);
    const int64_t R = s->rows, K = vc->num_classes;
    attn_status st;
    float *x, *lg;
    int64_t *y, *idx;
    attn__mark mk = attn__ws_mark(ctx);
    ATTN_TRYG(attn__ws_f32(ctx, &x, eb, R, R, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &lg, eb, K, 1, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)eb, sizeof *y, (void **)&y));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)eb, sizeof *idx, (void **)&idx));
    ATTN_TRYG(evaluate(ctx, m, s, K, mean, std, eb, x, lg, y, idx, loss, acc));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the task ---------------------------------------------------------------------------- */
typedef struct vit_run {
    const attn_vit_train_config *c;
    attn_module *m;
    const attn_images *tr, *te;
    attn_vit_model_info vm;
    attn_images_aug aug;
    int64_t n, B, spe, EB, K;
    float *x, *lg, *dlg;
    int64_t *y, *perm, *idx, perm_epoch, rows;
    float *step_loss, *epoch_log;
    attn_vit_train_report *r;
    int writer; /* rank 0 (or one process): writes the files */
    double t_start, elapsed0, t_mark;
} vit_run;

/* The images of step g: batch s of epoch e of the shuffled training set. */
static int64_t step_rows(int64_t n, int64_t B, int64_t spe, int64_t g) {
    int64_t s = g % spe;
    return n - s * B < B ? n - s * B : B;
}

double attn_vit_train_epoch_loss(const attn_vit_train_report *r, int64_t e, int64_t g,
                                 int64_t *images) {
    double sum = 0;
    int64_t k = 0;
    if (r && r->step_loss && r->steps_per_epoch > 0 && e >= 0)
        for (int64_t h = e * r->steps_per_epoch; h <= g && h < r->steps; h++) {
            int64_t b = step_rows(r->train_images, r->batch, r->steps_per_epoch, h);
            sum += (double)r->step_loss[h] * (double)b;
            k += b;
        }
    if (images) *images = k;
    return k ? sum / (double)k : 0.0;
}

/* Share `share` of `shares` of step g's images takes the rows [share b / shares,
 * (share + 1) b / shares) of the step's b. */
static attn_status vit_forward(void *user, attn_ctx *ctx, int64_t g, int share, int shares,
                               attn_saved *sv, attn_train_share *out) {
    vit_run *t = user;
    const int64_t e = g / t->spe, s = g % t->spe, b = step_rows(t->n, t->B, t->spe, g);
    const int64_t R = t->tr->rows, K = t->K;
    const int64_t lo = b * share / shares, hi = b * (share + 1) / shares, rows = hi - lo;
    if (t->perm_epoch != e) attn_images_shuffle(t->c->seed, (uint64_t)e, t->n, t->perm);
    t->perm_epoch = e;
    t->rows = rows;
    out->count = (double)rows, out->count_step = (double)b, out->items = (double)rows;
    if (rows == 0) return ATTN_OK;
    ATTN_TRY(attn_images_batch(ctx, t->tr, t->perm + s * t->B + lo, rows,
                               t->c->augment ? &t->aug : NULL, t->c->seed, (uint64_t)e,
                               t->vm.pixel_mean, t->vm.pixel_std, t->x, t->y));
    attn_tensor X = attn_view4(t->x, rows, 1, R, R), L = attn_view2(t->lg, rows, K),
                DL = attn_view2(t->dlg, rows, K);
    int64_t ts[1] = {rows};
    attn_tensor Y = attn_tensor_make(t->y, ATTN_I64, 1, ts);
    attn_run run = {t->c->dropout > 0, t->c->seed, (uint64_t)g << 16, lo}; /* lo: its masks */
    ATTN_TRY(attn_vit_forward_train(ctx, t->m, &X, &run, &L, sv));
    return attn_cross_entropy(ctx, &L, &Y, -100, t->c->label_smoothing, &out->loss, &DL);
}

static attn_status vit_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    vit_run *t = user;
    if (t->rows == 0) return ATTN_OK;
    if (scale != 1.0f) attn__scale_f(t->dlg, t->rows * t->K, scale);
    attn_tensor DL = attn_view2(t->dlg, t->rows, t->K);
    return attn_vit_backward_saved(ctx, t->m, sv, &DL, NULL);
}

static attn_status write_csv(attn_ctx *ctx, const char *path, const attn_vit_train_report *r) {
    attn_file_out *f = NULL;
    attn_status st = attn_file_out_open(ctx, path, &f);
    char line[512];
    int n = snprintf(line, sizeof line, "epoch");
    for (int c = 0; c < ATTN_VIT_LOG_COLS; c++)
        n += snprintf(line + n, sizeof line - (size_t)n, ",%s", log_names[c]);
    n += snprintf(line + n, sizeof line - (size_t)n, "\n");
    if (st == ATTN_OK) st = attn_file_out_write(f, line, (size_t)n);
    for (int64_t e = 0; st == ATTN_OK && e < r->epochs_done; e++) {
        const float *w = r->epoch_log + e * ATTN_VIT_LOG_COLS;
        n = snprintf(line, sizeof line, "%lld,%.6f,%.6f,%.6f,%.6g,%.1f,%.1f,%.1f\n",
                     (long long)e + 1, (double)w[ATTN_VIT_LOG_TRAIN_LOSS],
                     (double)w[ATTN_VIT_LOG_TEST_LOSS], (double)w[ATTN_VIT_LOG_TEST_ACC],
                     (double)w[ATTN_VIT_LOG_LR], (double)w[ATTN_VIT_LOG_TRAIN_IPS],
                     (double)w[ATTN_VIT_LOG_EVAL_IPS], (double)w[ATTN_VIT_LOG_ELAPSED]);
        if (n < 0 || (size_t)n >= sizeof line) n = 0; /* cannot happen: bounded fields */
        st = attn_file_out_write(f, line, (size_t)n);
    }
    if (st == ATTN_OK) st = attn_file_out_commit(f);
    else attn_file_out_abort(f);
    return st;
}

/* The model file and log.csv, on the writing rank. */
static attn_status write_files(attn_ctx *ctx, const vit_run *t) {
    if (!t->writer) return ATTN_OK;
    if (t->c->model_path) ATTN_TRY(attn_vit_model_save(ctx, t->m, &t->vm, t->c->model_path));
    if (t->c->csv_path) ATTN_TRY(write_csv(ctx, t->c->csv_path, t->r));
    return ATTN_OK;
}

/* After an epoch's last step: the test set, the epoch's row of the log, its files. */
static attn_status vit_evaluate(void *user, attn_ctx *ctx, int64_t step, attn_train_progress *p,
                                int *stop) {
    vit_run *t = user;
    attn_vit_train_report *r = t->r;
    (void)stop;
    t->step_loss[step - 1] = p->loss;
    r->steps_done = step;
    if (step % t->spe != 0) return ATTN_OK; /* stopped inside an epoch: no test pass */
    const int64_t e = step / t->spe - 1;
    int64_t seen;
    double t_ev = attn__now_s(), tl, ta, tr_loss = attn_vit_train_epoch_loss(r, e, step - 1, &seen);
    double t_tr = t_ev - t->t_mark;
    r->train_s += t_tr;
    ATTN_TRY(evaluate(ctx, t->m, t->te, t->K, t->vm.pixel_mean, t->vm.pixel_std, t->EB, t->x,
                      t->lg, t->y, t->idx, &tl, &ta));
    t_ev = attn__now_s() - t_ev;
    r->eval_s += t_ev;
    r->evals++;
    float *row = t->epoch_log + e * ATTN_VIT_LOG_COLS;
    row[ATTN_VIT_LOG_TRAIN_LOSS] = (float)tr_loss;
    row[ATTN_VIT_LOG_TEST_LOSS] = (float)tl;
    row[ATTN_VIT_LOG_TEST_ACC] = (float)ta;
    row[ATTN_VIT_LOG_LR] = p->lr;
    row[ATTN_VIT_LOG_TRAIN_IPS] = (float)((double)t->n / t_tr);
    row[ATTN_VIT_LOG_EVAL_IPS] = (float)((double)t->te->n / t_ev);
    r->elapsed_s = t->elapsed0 + attn__now_s() - t->t_start;
    row[ATTN_VIT_LOG_ELAPSED] = (float)r->elapsed_s;
    r->epochs_done = e + 1;
    r->test_loss = tl, r->test_accuracy = ta;
    p->accuracy = (float)ta, p->eval_loss = (float)tl;
    ATTN_TRY(write_files(ctx, t));
    if (t->c->on_epoch) ATTN_TRY(t->c->on_epoch(t->c->user, ctx, r));
    t->t_mark = attn__now_s();
    return ATTN_OK;
}

/* The ViT's part of a checkpoint (the loop writes the model, optimiser, step and settings):
 * the model's config, the run's log. */
static attn_status vit_describe(void *user, attn_ctx *ctx, attn_st_writer *w) {
    vit_run *t = user;
    const attn_vit_train_report *r = t->r;
    (void)ctx;
    attn_status st = put_meta(w, &t->vm);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "epochs_done", r->epochs_done);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "steps_done", r->steps_done);
    if (st == ATTN_OK) st = attn__meta_put_f(w, "elapsed_s", r->elapsed_s);
    if (st == ATTN_OK && r->steps_done > 0) {
        int64_t shape[1] = {r->steps_done};
        st = attn_st_writer_add(w, "log.step_loss", ATTN_F32, 1, shape, t->step_loss);
    }
    if (st == ATTN_OK && r->epochs_done > 0) {
        int64_t shape[2] = {r->epochs_done, ATTN_VIT_LOG_COLS};
        st = attn_st_writer_add(w, "log.epochs", ATTN_F32, 2, shape, t->epoch_log);
    }
    return st;
}

/* After every step: the log, then the caller's callback. */
static int vit_progress(void *user, const attn_train_progress *p) {
    vit_run *t = user;
    attn_vit_train_report *r = t->r;
    const int64_t g = p->step - 1;
    t->step_loss[g] = p->loss;
    r->steps_done = p->step;
    r->images_seen += step_rows(t->n, t->B, t->spe, g);
    r->steps_run++;
    if (!t->c->on_step) return 0;
    double now = attn__now_s();
    r->now_s = now;
    r->run_elapsed_s = t->elapsed0 + now - t->t_start;
    /* training time so far: the finished epochs' and this one's since its start */
    double saved = r->train_s;
    r->train_s = saved + (now - t->t_mark);
    int stop = t->c->on_step(t->c->user, p, r);
    r->train_s = saved;
    return stop;
}

/* Reads a log tensor of exactly n floats (n == 0: absent) into dst. */
static attn_status read_log(attn_ctx *ctx, const char *name, const attn_st *st, const char *k,
                            int64_t n, float *dst) {
    attn_st_tensor t;
    if (n == 0) return ATTN_OK;
    ATTN_FAIL_IF(attn_st_find(st, k, &t) != ATTN_OK || t.numel != n, ctx, ATTN_E_FORMAT,
                 "%s: the tensor \"%s\" is missing or not of %lld values", name, k,
                 (long long)n);
    return attn_st_to_f32(ctx, &t, dst, (size_t)n);
}

/* The settings a resumed run must share with the run it continues. */
#define VIT_SETTINGS 16
static int settings(const attn_vit_train_config *c, const attn_images *tr,
                    attn_train_setting *s) {
    int n = 0;
    attn_train_setting_i(&s[n++], "train.epochs", "--epochs", c->epochs);
    attn_train_setting_i(&s[n++], "train.batch", "--batch", c->batch);
    attn_train_setting_f(&s[n++], "train.lr", "--lr", c->lr);
    attn_train_setting_i(&s[n++], "train.warmup", "--warmup", c->warmup);
    attn_train_setting_f(&s[n++], "train.weight_decay", "--weight-decay", c->weight_decay);
    attn_train_setting_f(&s[n++], "train.clip", "--clip", c->clip);
    attn_train_setting_f(&s[n++], "train.label_smoothing", "--label-smoothing",
                         c->label_smoothing);
    attn_train_setting_i(&s[n++], "train.seed", "--seed", (long long)c->seed);
    attn_train_setting_s(&s[n++], "train.augment", "--no-augment", c->augment ? "yes" : "no");
    attn_train_setting_i(&s[n++], "train.pad", "--pad", c->augment ? c->pad : 0);
    attn_train_setting_s(&s[n++], "train.dtype", "--dtype", c->dtype ? c->dtype : "f32");
    attn_train_setting_i(&s[n++], "train.images", "--limit (the training images)", tr->n);
    /* the training set itself: FNV-1a over its pixels and labels */
    uint64_t h = 1469598103934665603ULL;
    size_t np = (size_t)(tr->n * tr->rows * tr->cols);
    for (size_t i = 0; i < np; i++) h = (h ^ tr->pixels[i]) * 1099511628211ULL;
    for (int64_t i = 0; i < tr->n; i++) h = (h ^ tr->labels[i]) * 1099511628211ULL;
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    attn_train_setting_s(&s[n++], "train.data_fnv1a64", "--data (the training images)", hex);
    return n;
}

attn_status attn_vit_train_check(attn_ctx *ctx, const attn_images *tr, const attn_images *te,
                                 const attn_vit_train_config *c) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "attn_vit_train: cfg is NULL");
    ATTN_TRY(set_ok(ctx, tr, "training"));
    ATTN_TRY(set_ok(ctx, te, "test"));
    const char *data = c->data_name ? c->data_name : "the data";
    ATTN_FAIL_IF(tr->rows != tr->cols || te->rows != tr->rows || te->cols != tr->cols, ctx,
                 ATTN_E_INVALID, "the images must be square and of one size (training "
                 "%lldx%lld, test %lldx%lld)", (long long)tr->cols, (long long)tr->rows,
                 (long long)te->cols, (long long)te->rows);
    ATTN_FAIL_IF(c->num_classes < 1 || c->num_classes > 256, ctx, ATTN_E_INVALID,
                 "attn_vit_train: num_classes must be 1..256, got %lld",
                 (long long)c->num_classes);
    const int64_t K = c->num_classes;
    ATTN_FAIL_IF(!tr->labels || !te->labels || tr->num_classes > K || te->num_classes > K, ctx,
                 ATTN_E_INVALID, "the labels must be 0..%lld%s; %s has label %d",
                 (long long)K - 1, K == 10 ? " (Fashion-MNIST's classes)" : "", data,
                 (tr->num_classes > te->num_classes ? tr->num_classes : te->num_classes) - 1);
    ATTN_FAIL_IF(c->patch < 1 || tr->rows % c->patch != 0, ctx, ATTN_E_INVALID,
                 "--patch %lld does not divide the image size %lld", (long long)c->patch,
                 (long long)tr->rows);
    return ATTN_OK;
}

/* The config's numbers within the bounds of the attn program's options. */
static attn_status config_ok(attn_ctx *ctx, const attn_vit_train_config *c) {
#define VIT_RANGE(f, lo, hi)                                                                  \
    ATTN_FAIL_IF(!((f) >= (lo) && (f) <= (hi)), ctx, ATTN_E_INVALID,                          \
                 "attn_vit_train: " #f " = %g is not in [%g, %g]", (double)(f), (double)(lo), \
                 (double)(hi))
    VIT_RANGE(c->d_model, 1, 65536);
    VIT_RANGE(c->nhead, 1, 1024);
    VIT_RANGE(c->num_layers, 1, 1024);
    VIT_RANGE(c->dim_feedforward, 1, 1 << 20);
    VIT_RANGE(c->dropout, 0, 0.99);
    VIT_RANGE(c->epochs, 1, 100000);
    VIT_RANGE(c->batch, 1, 65536);
    VIT_RANGE(c->warmup, 0, 100000000);
    VIT_RANGE(c->lr, 1e-7, 10);
    VIT_RANGE(c->weight_decay, 0, 10);
    VIT_RANGE(c->clip, 0, 1e9);
    VIT_RANGE(c->label_smoothing, 0, 0.99);
    VIT_RANGE(c->pad, 0, 64);
    VIT_RANGE(c->eval_batch, 1, 65536);
    VIT_RANGE(c->stop_after, 0, 100000);
    VIT_RANGE(c->save_every, 0, INT64_MAX);
    VIT_RANGE(c->pixel_std, 1e-6, 1e6);
    VIT_RANGE(c->pixel_mean, -1e6, 1e6);
#undef VIT_RANGE
    ATTN_FAIL_IF(c->d_model % c->nhead != 0, ctx, ATTN_E_INVALID,
                 "--heads %lld must divide --dim %lld", (long long)c->nhead,
                 (long long)c->d_model);
    ATTN_FAIL_IF(c->accum < 0 || c->accum > 65536, ctx, ATTN_E_INVALID,
                 "attn_vit_train: accum must be 1..65536 (0: 1), got %d", c->accum);
    return ATTN_OK;
}

/* The data-parallel table, when there is one, complete (checked when training starts: a
 * caller may fill it between attn_vit_train_resume_check and attn_vit_train). */
static attn_status dp_ok(attn_ctx *ctx, const attn_train_dp *dp) {
    if (dp)
        ATTN_FAIL_IF(dp->nranks < 1 || dp->rank < 0 || dp->rank >= dp->nranks || !dp->begin ||
                         !dp->end || !dp->sum,
                     ctx, ATTN_E_INVALID,
                     "attn_vit_train: the data-parallel table is incomplete (rank %d of %d, "
                     "functions missing)", dp->rank, dp->nranks);
    return ATTN_OK;
}

/* The checkpoint rs continues a run of cfg's model (spe steps per epoch, total steps): its
 * config, where it stands (*epochs, *steps, *elapsed) and its log's tensors. */
static attn_status resume_check(attn_ctx *ctx, const attn_vit_train_config *c, int64_t image,
                                const attn_st *rs, int64_t spe, int64_t total, int64_t *epochs,
                                int64_t *steps, float *elapsed) {
    const char *name = c->resume_name ? c->resume_name : "the checkpoint";
    attn_vit_model_info saved;
    ATTN_TRY(attn_vit_model_read(ctx, rs, name, &saved));
    const attn_vit_config *a = &saved.cfg;
    const attn_vit_config b = attn_vit_train_model_config(c, image);
    ATTN_FAIL_IF(a->image_size != b.image_size || a->patch != b.patch ||
                     a->tf.d_model != b.tf.d_model || a->tf.nhead != b.tf.nhead ||
                     a->tf.num_encoder_layers != b.tf.num_encoder_layers ||
                     a->tf.dim_feedforward != b.tf.dim_feedforward ||
                     a->tf.dropout != b.tf.dropout,
                 ctx, ATTN_E_INVALID,
                 "--resume: %s holds another model (--patch %lld --layers %lld --dim %lld "
                 "--heads %lld --ffn %lld --dropout %g); give the same options", name,
                 (long long)a->patch, (long long)a->tf.num_encoder_layers,
                 (long long)a->tf.d_model, (long long)a->tf.nhead,
                 (long long)a->tf.dim_feedforward, (double)a->tf.dropout);
    ATTN_TRY(get_i(ctx, name, rs, "epochs_done", 0, c->epochs, epochs));
    ATTN_TRY(get_i(ctx, name, rs, "steps_done", 0, total, steps));
    ATTN_TRY(get_f(ctx, name, rs, "elapsed_s", 0, 1e12, elapsed));
    ATTN_FAIL_IF(*epochs != *steps / spe, ctx, ATTN_E_FORMAT,
                 "%s: steps_done %lld is not in epoch epochs_done + 1 = %lld of %lld steps", name,
                 (long long)*steps, (long long)*epochs + 1, (long long)spe);
    const char *const keys[2] = {"log.step_loss", "log.epochs"};
    const int64_t want[2] = {*steps, *epochs * ATTN_VIT_LOG_COLS};
    for (int i = 0; i < 2; i++) {
        attn_st_tensor t;
        ATTN_FAIL_IF(want[i] && (attn_st_find(rs, keys[i], &t) != ATTN_OK || t.numel != want[i]),
                     ctx, ATTN_E_FORMAT, "%s: the tensor \"%s\" is missing or not of %lld values",
                     name, keys[i], (long long)want[i]);
    }
    return ATTN_OK;
}

/* The steps per epoch and in all of a run of cfg on n training images. */
static void run_steps(const attn_vit_train_config *c, int64_t n, int64_t *spe, int64_t *total) {
    const int64_t B = c->batch < n ? c->batch : n;
    *spe = (n + B - 1) / B, *total = *spe * c->epochs;
}

attn_status attn_vit_train_resume_check(attn_ctx *ctx, const attn_images *tr,
                                        const attn_vit_train_config *c, const attn_st *resume) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!c || !resume, ctx, ATTN_E_INVALID, "attn_vit_train_resume_check: NULL argument");
    ATTN_TRY(set_ok(ctx, tr, "training"));
    ATTN_TRY(config_ok(ctx, c));
    int64_t spe, total, e, g;
    float el;
    run_steps(c, tr->n, &spe, &total);
    return resume_check(ctx, c, tr->rows, resume, spe, total, &e, &g, &el);
}

/* Continuing resume: its model must be cfg's; the run's log so far. */
static attn_status resume_load(attn_ctx *ctx, vit_run *t, const attn_st *rs, int64_t total) {
    const char *name = t->c->resume_name ? t->c->resume_name : "the checkpoint";
    attn_vit_train_report *r = t->r;
    float el;
    ATTN_TRY(resume_check(ctx, t->c, t->tr->rows, rs, t->spe, total, &r->epochs_done,
                          &r->steps_done, &el));
    r->elapsed_s = el;
    ATTN_TRY(read_log(ctx, name, rs, "log.step_loss", r->steps_done, t->step_loss));
    ATTN_TRY(read_log(ctx, name, rs, "log.epochs", r->epochs_done * ATTN_VIT_LOG_COLS,
                      t->epoch_log));
    r->resumed_epochs = r->epochs_done, r->resumed_steps = r->steps_done;
    return ATTN_OK;
}

attn_status attn_vit_train(attn_ctx *ctx, const attn_images *tr, const attn_images *te,
                           const attn_vit_train_config *c, const attn_st *resume,
                           attn_vit_train_report *report, attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    if (model) *model = NULL;
    ATTN_TRY(attn_vit_train_check(ctx, tr, te, c));
    ATTN_TRY(config_ok(ctx, c));
    ATTN_TRY(dp_ok(ctx, c->dp));
    attn_vit_train_report rep0, *r = report ? report : &rep0;
    memset(r, 0, sizeof *r);
    vit_run t;
    memset(&t, 0, sizeof t);
    t.c = c, t.tr = tr, t.te = te, t.r = r, t.K = c->num_classes;
    t.writer = !c->dp || c->dp->rank == 0;
    const int64_t R = tr->rows, K = t.K;
    t.vm.cfg = attn_vit_train_model_config(c, R);
    t.vm.pixel_mean = c->pixel_mean, t.vm.pixel_std = c->pixel_std;
    attn_train_setting set[VIT_SETTINGS];
    int nset = settings(c, tr, set);
    const int64_t n = tr->n, B = c->batch < n ? c->batch : n, spe = (n + B - 1) / B,
                  total = spe * c->epochs, EB = c->eval_batch, XB = B > EB ? B : EB;
    t.n = n, t.B = B, t.spe = spe, t.EB = EB, t.perm_epoch = -1;
    t.aug.pad = c->pad, t.aug.flip = 1;
    const int64_t last_epoch = c->stop_after && c->stop_after < c->epochs ? c->stop_after
                                                                          : c->epochs;
    r->train_images = n, r->test_images = te->n, r->batch = B, r->steps_per_epoch = spe;
    r->steps = total, r->last_epoch = last_epoch;
    attn_status st = ATTN_OK;
    attn_module *m = NULL;
    size_t nx, nl;
    ATTN_FAIL_IF(!attn__mul_size((size_t)XB, (size_t)(R * R), &nx) ||
                     !attn__mul_size((size_t)XB, (size_t)K, &nl) ||
                     nx > SIZE_MAX / sizeof(float),
                 ctx, ATTN_E_INVALID, "attn_vit_train: batches of %lld images of %lldx%lld "
                 "overflow", (long long)XB, (long long)R, (long long)R);
    if (!(t.x = malloc(nx * sizeof(float))) || !(t.lg = malloc(nl * sizeof(float))) ||
        !(t.dlg = malloc((size_t)(B * K) * sizeof(float))) ||
        !(t.y = malloc((size_t)XB * sizeof(int64_t))) ||
        !(t.idx = malloc((size_t)EB * sizeof(int64_t))) ||
        !(t.perm = malloc((size_t)n * sizeof(int64_t))) ||
        !(t.step_loss = calloc((size_t)total, sizeof(float))) ||
        !(t.epoch_log = calloc((size_t)(c->epochs * ATTN_VIT_LOG_COLS), sizeof(float)))) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "attn_vit_train: out of memory");
        goto done;
    }
    r->step_loss = t.step_loss, r->epoch_log = t.epoch_log;
    ATTN_TRYG(attn_vit_create(ctx, &t.vm.cfg, &m));
    ATTN_TRYG(attn_module_init(ctx, m, c->seed));
    ATTN_TRYG(attn_module_enable_grad(ctx, m));
    t.m = m;
    r->parameters = attn_module_numel(m);
    if (resume) ATTN_TRYG(resume_load(ctx, &t, resume, total));
    if (c->save_init && !resume && t.writer)
        ATTN_TRYG(attn_vit_model_save(ctx, m, &t.vm, c->save_init));
    if (c->on_start) ATTN_TRYG(c->on_start(c->user, ctx, r));
    t.t_start = attn__now_s(), t.elapsed0 = r->elapsed_s, t.t_mark = t.t_start;
    {
        attn_train_task task = {"vit", "images", m, &t, vit_forward, vit_backward, vit_evaluate,
                                vit_describe, set, nset};
        attn_train_options o = attn_train_defaults();
        o.steps = total, o.warmup = c->warmup, o.lr = c->lr, o.lr_min = 0.0f;
        o.weight_decay = c->weight_decay, o.clip = c->clip, o.accum = c->accum ? c->accum : 1;
        o.eval_every = spe, o.stop_at = last_epoch * spe, o.state_path = c->state_path;
        o.save_every = c->save_every > 0 ? c->save_every : spe;
        o.log_path = c->log_path, o.tb_dir = c->tb_dir, o.resume_name = c->resume_name;
        o.dp = c->dp;
        o.progress = vit_progress, o.user = &t;
        attn_train_result res;
        ATTN_TRYG(attn_train_run(ctx, &task, &o, resume, &res));
        r->end = res.end, r->end_step = res.step;
    }
    if (r->epochs_done == 0 || (resume && r->evals == 0)) /* nothing trained here */
        ATTN_TRYG(write_files(ctx, &t));
done:
    free(t.x), free(t.lg), free(t.dlg), free(t.y), free(t.idx), free(t.perm);
    if (st == ATTN_OK && model) {
        *model = m;
        m = NULL;
    }
    attn_module_free(m);
    if (report && st == ATTN_OK) {
        /* the logs outlive the call: the report keeps them until attn_vit_train_report_free */
        r->step_loss = t.step_loss, r->epoch_log = t.epoch_log;
    } else {
        free(t.step_loss), free(t.epoch_log);
        r->step_loss = r->epoch_log = NULL;
    }
    return st;
}

void attn_vit_train_report_free(attn_vit_train_report *r) {
    if (!r) return;
    free((void *)r->step_loss);
    free((void *)r->epoch_log);
    r->step_loss = r->epoch_log = NULL;
}
