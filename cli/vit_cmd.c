/* attn train vit / classify / attention-map: a Vision Transformer (attn_vit_* in attn.h) on
 * Fashion-MNIST (or any IDX set of square grayscale images with labels 0..9), read through
 * cli/imgdata.h.
 *
 * The training loop is here, on the core API: img_shuffle per epoch, img_batch with
 * augmentation, attn_vit_forward_train + attn_cross_entropy + attn_vit_backward_saved,
 * gradient clipping, AdamW with warmup and cosine decay, the test set after each epoch.  A run
 * is a function of its settings alone (not of --threads): the order of epoch e is
 * img_shuffle(seed, e), the augmentation of an image in epoch e is img_batch's stream e, step
 * g's dropout is offset g << 16 of the seed's stream, so a run resumed from the state of an
 * epoch continues exactly as the uninterrupted one.
 *
 * Output folder: model.safetensors (the parameters under their state_dict names, the config in
 * the metadata: task "vit"), state.safetensors (the same under "model.", AdamW under "optim.",
 * the run's settings and log), log.csv (one line per epoch) and loss.svg. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "imgdata.h"
#include "pictures/pictures.h"

#define VIT_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define VIT_CLASSES 10 /* Fashion-MNIST's; labels must be below it */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static const char *class_name(int64_t k, int64_t K, char *buf, size_t cap) {
    if (K == VIT_CLASSES && k >= 0 && k < VIT_CLASSES) return img_fashion_classes[k];
    snprintf(buf, cap, "class %lld", (long long)k);
    return buf;
}

/* ---- the checkpoint's config ------------------------------------------------------------- */
/* A ViT as `attn train vit` builds it: pre-norm layers with GELU, one channel; and the pixel
 * normalisation it was trained with. */
typedef struct vit_meta {
    attn_vit_config cfg;
    float mean, std;
} vit_meta;

static attn_vit_config vit_config(int64_t image, int64_t patch, int64_t dim, int64_t heads,
                                  int64_t ffn, int64_t layers, float dropout) {
    attn_vit_config c;
    memset(&c, 0, sizeof c);
    c.tf = attn_transformer_defaults(dim, heads);
    c.tf.dim_feedforward = ffn;
    c.tf.dropout = dropout;
    c.tf.activation = ATTN_ACT_GELU;
    c.tf.layer_norm_eps = 1e-6f;
    c.tf.norm_first = 1;
    c.tf.bias = 1;
    c.tf.num_encoder_layers = layers;
    c.image_size = image;
    c.channels = 1;
    c.patch = patch;
    c.num_classes = VIT_CLASSES;
    return c;
}

static attn_status meta_i(attn_st_writer *w, const char *k, long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return attn_st_writer_meta(w, k, b);
}
static attn_status meta_f(attn_st_writer *w, const char *k, double v) {
    char b[40];
    snprintf(b, sizeof b, "%.9g", v);
    return attn_st_writer_meta(w, k, b);
}

static attn_status put_meta(attn_st_writer *w, const vit_meta *vm) {
    const attn_vit_config *c = &vm->cfg;
    attn_status st = attn_st_writer_meta(w, "task", "vit");
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "model", "vit");
    if (st == ATTN_OK) st = meta_i(w, "image_size", c->image_size);
    if (st == ATTN_OK) st = meta_i(w, "channels", c->channels);
    if (st == ATTN_OK) st = meta_i(w, "patch", c->patch);
    if (st == ATTN_OK) st = meta_i(w, "num_classes", c->num_classes);
    if (st == ATTN_OK) st = meta_i(w, "d_model", c->tf.d_model);
    if (st == ATTN_OK) st = meta_i(w, "nhead", c->tf.nhead);
    if (st == ATTN_OK) st = meta_i(w, "num_layers", c->tf.num_encoder_layers);
    if (st == ATTN_OK) st = meta_i(w, "dim_feedforward", c->tf.dim_feedforward);
    if (st == ATTN_OK) st = meta_f(w, "dropout", c->tf.dropout);
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "activation", "gelu");
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "norm_first", "true");
    if (st == ATTN_OK) st = meta_f(w, "layer_norm_eps", c->tf.layer_norm_eps);
    if (st == ATTN_OK) st = meta_f(w, "pixel_mean", vm->mean);
    if (st == ATTN_OK) st = meta_f(w, "pixel_std", vm->std);
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "classes", "fashion-mnist");
    return st;
}

/* Prints "attn CMD: PATH: " and the rest as printf; returns 0. */
static int bad(const char *cmd, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int bad(const char *cmd, const char *path, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attn %s: %s: ", cmd, path);
    attn_cli_put_escaped(stderr, msg); /* it may quote the file's metadata */
    fputc('\n', stderr);
    return 0;
}

static int get_i(const char *cmd, const char *path, const attn_st *st, const char *k,
                 long long lo, long long hi, int64_t *v) {
    const char *s = attn_st_meta(st, k);
    long long x;
    if (!s) return bad(cmd, path, "the metadata has no \"%s\"", k);
    if (!attn_cli_parse_i64(s, lo, hi, &x))
        return bad(cmd, path, "metadata \"%s\" = \"%.40s\" is not an integer in [%lld, %lld]", k,
                   s, lo, hi);
    *v = x;
    return 1;
}

static int get_f(const char *cmd, const char *path, const attn_st *st, const char *k, double lo,
                 double hi, float *v) {
    const char *s = attn_st_meta(st, k);
    double x;
    if (!s) return bad(cmd, path, "the metadata has no \"%s\"", k);
    if (!attn_cli_parse_f(s, lo, hi, &x))
        return bad(cmd, path, "metadata \"%s\" = \"%.40s\" is not a number in [%g, %g]", k, s, lo,
                   hi);
    *v = (float)x;
    return 1;
}

/* The tensor prefix + name must be there with this shape (ndim <= 3). */
static int want_tensor(const char *cmd, const char *path, const attn_st *st, const char *prefix,
                       const char *name, int ndim, const int64_t *shape) {
    char full[256];
    attn_st_tensor t;
    snprintf(full, sizeof full, "%s%s", prefix, name);
    if (attn_st_find(st, full, &t) != ATTN_OK)
        return bad(cmd, path, "the tensor \"%s\" is missing", full);
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
        return bad(cmd, path, "the tensor \"%s\" is [%s], the config in the metadata says [%s]",
                   full, b, a);
    }
    return 1;
}

/* Reads the config of a checkpoint written by `attn train vit` (prefix: where its parameters
 * are, "" or "model.") and checks that the tensors the config implies are there with their
 * shapes, so that nothing the metadata claims is allocated unless the file backs it.  Prints
 * the problem and returns 0 on failure. */
static int read_meta(const char *cmd, const char *path, attn_ctx *ctx, const attn_st *st,
                     const char *prefix, vit_meta *vm) {
    const char *task = attn_st_meta(st, "task");
    if (!task)
        return bad(cmd, path, "not a checkpoint of 'attn train vit' (its metadata has no "
                              "\"task\")");
    if (strcmp(task, "vit") != 0) {
        if (!strcmp(task, "dates") || !strcmp(task, "charlm"))
            return bad(cmd, path, "a checkpoint of 'attn train %s', not of 'attn train vit'",
                       task);
        return bad(cmd, path, "not a checkpoint of 'attn train vit' (metadata task = %.60s)",
                   task);
    }
    int64_t img = 0, ch = 0, patch = 0, K = 0, E = 0, H = 0, NL = 0, F = 0;
    float drop = 0, eps = 0, mean = 0, std = 0;
    long long max_layers = (long long)attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
    if (!get_i(cmd, path, st, "image_size", 1, 65536, &img) ||
        !get_i(cmd, path, st, "channels", 1, 1, &ch) ||
        !get_i(cmd, path, st, "patch", 1, img, &patch) ||
        !get_i(cmd, path, st, "num_classes", 1, 65536, &K) ||
        !get_i(cmd, path, st, "d_model", 1, 65536, &E) ||
        !get_i(cmd, path, st, "nhead", 1, E, &H) ||
        !get_i(cmd, path, st, "num_layers", 1, max_layers, &NL) ||
        !get_i(cmd, path, st, "dim_feedforward", 1, 1 << 20, &F) ||
        !get_f(cmd, path, st, "dropout", 0, 0.99, &drop) ||
        !get_f(cmd, path, st, "layer_norm_eps", 1e-30, 1, &eps) ||
        !get_f(cmd, path, st, "pixel_mean", -1e6, 1e6, &mean) ||
        !get_f(cmd, path, st, "pixel_std", 1e-6, 1e6, &std))
        return 0;
    const char *act = attn_st_meta(st, "activation"), *nf = attn_st_meta(st, "norm_first");
    if (!act || strcmp(act, "gelu") != 0 || !nf || strcmp(nf, "true") != 0)
        return bad(cmd, path, "only pre-norm GELU models are supported (metadata activation, "
                              "norm_first)");
    if (img % patch != 0)
        return bad(cmd, path, "patch %lld does not divide image_size %lld", (long long)patch,
                   (long long)img);
    if (E % H != 0)
        return bad(cmd, path, "nhead %lld does not divide d_model %lld", (long long)H,
                   (long long)E);
    int64_t G = img / patch, N = G * G;
    int64_t s_proj[2] = {E, ch * patch * patch}, s_pos[3] = {1, N + 1, E}, s_head[2] = {K, E},
            s_lin[2] = {F, E};
    if (!want_tensor(cmd, path, st, prefix, "embed.proj.weight", 2, s_proj) ||
        !want_tensor(cmd, path, st, prefix, "embed.pos_embed", 3, s_pos) ||
        !want_tensor(cmd, path, st, prefix, "head.weight", 2, s_head))
        return 0;
    for (int64_t i = 0; i < NL; i++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%lld.linear1.weight", (long long)i);
        if (!want_tensor(cmd, path, st, prefix, name, 2, s_lin)) return 0;
    }
    {
        char name[96];
        attn_st_tensor t;
        snprintf(name, sizeof name, "%slayers.%lld.linear1.weight", prefix, (long long)NL);
        if (attn_st_find(st, name, &t) == ATTN_OK)
            return bad(cmd, path, "the file holds more layers than num_layers = %lld",
                       (long long)NL);
    }
    vm->cfg = vit_config(img, patch, E, H, F, NL, drop);
    vm->cfg.num_classes = K;
    vm->cfg.tf.layer_norm_eps = eps;
    vm->mean = mean, vm->std = std;
    return 1;
}

/* ---- shared by the commands -------------------------------------------------------------- */
/* A trained model: the module, its config and the checkpoint it came from. */
typedef struct vit_model {
    attn_module *m;
    vit_meta vm;
    attn_st *st;
    const char *prefix;
    char path[4096];
} vit_model;

static void vit_model_free(vit_model *v) {
    attn_module_free(v->m);
    attn_st_free(v->st);
    memset(v, 0, sizeof *v);
}

/* --model DIR (its model.safetensors) or FILE (a model.safetensors or state.safetensors of
 * `attn train vit`).  Prints the problem and returns 0 on failure. */
static int load_model(const char *cmd, attn_ctx *ctx, const char *arg, vit_model *v) {
    memset(v, 0, sizeof *v);
    struct stat sb;
    if (stat(arg, &sb) != 0) {
        fprintf(stderr, "attn %s: --model %s: %s\n", cmd, arg, strerror(errno));
        return 0;
    }
    if (S_ISDIR(sb.st_mode)) snprintf(v->path, sizeof v->path, "%s/model.safetensors", arg);
    else snprintf(v->path, sizeof v->path, "%s", arg);
    attn_status st = attn_st_read_file(ctx, v->path, &v->st);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    attn_st_tensor t;
    v->prefix = attn_st_find(v->st, "model.head.weight", &t) == ATTN_OK ? "model." : "";
    if (!read_meta(cmd, v->path, ctx, v->st, v->prefix, &v->vm)) {
        vit_model_free(v);
        return 0;
    }
    st = attn_vit_create(ctx, &v->vm.cfg, &v->m);
    if (st == ATTN_OK) st = attn_module_load(ctx, v->m, v->st, v->prefix, 1);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        vit_model_free(v);
        return 0;
    }
    return 1;
}

/* One image to classify or draw: normalised pixels [R*C] and where it came from. */
typedef struct vit_input {
    float *x;        /* [R, C] normalised */
    uint8_t *pixels; /* [R, C] */
    int64_t index;   /* --index, or -1 for a file */
    int label;       /* -1 when unknown */
    const char *file;
} vit_input;

/* Image `index` of the test (train = 0) or training set in dir; prints the problem and returns
 * 0 on failure. */
static int input_index(const char *cmd, const char *dir, int train, int64_t index,
                       const vit_model *v, vit_input *in) {
    img_set s;
    char err[1024];
    memset(in, 0, sizeof *in);
    if (img_mnist_load(dir, train, index + 1, &s, err, sizeof err)) {
        fprintf(stderr, "attn %s: %s\n", cmd, err);
        return 0;
    }
    int ok = 0;
    int64_t R = v->vm.cfg.image_size;
    if (s.n <= index)
        fprintf(stderr, "attn %s: --index %lld: the %s set in %s has %lld images\n", cmd,
                (long long)index, train ? "training" : "test", dir, (long long)s.n);
    else if (s.rows != R || s.cols != R)
        fprintf(stderr, "attn %s: the images in %s are %lldx%lld pixels; the model takes %lldx%lld\n",
                cmd, dir, (long long)s.cols, (long long)s.rows, (long long)R, (long long)R);
    else if (!(in->x = malloc((size_t)(R * R) * sizeof(float))) ||
             !(in->pixels = malloc((size_t)(R * R))))
        fprintf(stderr, "attn %s: out of memory\n", cmd);
    else {
        img_batch(&s, &index, 1, NULL, 0, 0, v->vm.mean, v->vm.std, in->x, NULL);
        memcpy(in->pixels, s.pixels + index * R * R, (size_t)(R * R));
        in->index = index;
        in->label = s.labels ? s.labels[index] : -1;
        ok = 1;
    }
    img_set_free(&s);
    return ok;
}

/* A PGM or PNG file, which must be the model's size. */
static int input_file(const char *cmd, const char *path, const vit_model *v, vit_input *in) {
    char err[1024];
    int64_t rows, cols, R = v->vm.cfg.image_size;
    uint8_t *px;
    memset(in, 0, sizeof *in);
    if (img_read_gray(path, &rows, &cols, &px, err, sizeof err)) {
        fprintf(stderr, "attn %s: %s\n", cmd, err);
        return 0;
    }
    if (rows != R || cols != R) {
        fprintf(stderr, "attn %s: %s is %lldx%lld pixels; the model takes %lldx%lld images\n",
                cmd, path, (long long)cols, (long long)rows, (long long)R, (long long)R);
        free(px);
        return 0;
    }
    if (!(in->x = malloc((size_t)(R * R) * sizeof(float)))) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        free(px);
        return 0;
    }
    img_set s = {1, R, R, px, NULL, 0};
    int64_t zero = 0;
    img_batch(&s, &zero, 1, NULL, 0, 0, v->vm.mean, v->vm.std, in->x, NULL);
    in->pixels = px;
    in->index = -1;
    in->label = -1;
    in->file = path;
    return 1;
}

static void input_free(vit_input *in) {
    free(in->x);
    free(in->pixels);
    memset(in, 0, sizeof *in);
}

/* Class probabilities of one image: softmax of the logits into p [K]. */
static attn_status predict(attn_ctx *ctx, const vit_model *v, const vit_input *in, float *logits,
                           double *p) {
    int64_t R = v->vm.cfg.image_size, K = v->vm.cfg.num_classes;
    attn_tensor X = attn_view4(in->x, 1, 1, R, R), L = attn_view2(logits, 1, K);
    attn_status st = attn_vit_forward(ctx, v->m, &X, NULL, &L);
    if (st != ATTN_OK) return st;
    double mx = logits[0], sum = 0;
    for (int64_t k = 1; k < K; k++) mx = logits[k] > mx ? logits[k] : mx;
    for (int64_t k = 0; k < K; k++) sum += p[k] = exp((double)logits[k] - mx);
    for (int64_t k = 0; k < K; k++) p[k] /= sum;
    return ATTN_OK;
}

static int64_t argmax_d(const double *p, int64_t n) {
    int64_t b = 0;
    for (int64_t k = 1; k < n; k++)
        if (p[k] > p[b]) b = k;
    return b;
}

/* ---- attn train vit ---------------------------------------------------------------------- */
enum { LOG_TRAIN_LOSS, LOG_TEST_LOSS, LOG_TEST_ACC, LOG_LR, LOG_TRAIN_IPS, LOG_EVAL_IPS,
       LOG_ELAPSED, LOG_COLS };
static const char *const log_names[LOG_COLS] = {
    "train_loss", "test_loss", "test_accuracy", "lr", "train_images_per_s", "eval_images_per_s",
    "elapsed_s"};

typedef struct train_opts {
    const char *data, *out, *save_init;
    long long patch, layers, dim, heads, ffn, epochs, batch, warmup, seed, limit, test_limit,
        threads, stop_after, pad, eval_batch;
    double lr, wd, dropout, clip, smoothing;
    int dtype, resume, quiet, json, no_augment;
} train_opts;

/* The settings a resumed run must share with the run it continues, as metadata "train.KEY"
 * (attn_train_setting). */
static int settings(const train_opts *o, const img_set *tr, attn_train_setting *s) {
    int n = 0;
    attn_train_setting_i(&s[n++], "train.epochs", "--epochs", o->epochs);
    attn_train_setting_i(&s[n++], "train.batch", "--batch", o->batch);
    attn_train_setting_f(&s[n++], "train.lr", "--lr", (float)o->lr);
    attn_train_setting_i(&s[n++], "train.warmup", "--warmup", o->warmup);
    attn_train_setting_f(&s[n++], "train.weight_decay", "--weight-decay", (float)o->wd);
    attn_train_setting_f(&s[n++], "train.clip", "--clip", (float)o->clip);
    attn_train_setting_f(&s[n++], "train.label_smoothing", "--label-smoothing", (float)o->smoothing);
    attn_train_setting_i(&s[n++], "train.seed", "--seed", o->seed);
    attn_train_setting_s(&s[n++], "train.augment", "--no-augment", o->no_augment ? "no" : "yes");
    attn_train_setting_i(&s[n++], "train.pad", "--pad", o->no_augment ? 0 : o->pad);
    attn_train_setting_s(&s[n++], "train.dtype", "--dtype", attn_cli_dtype_name(o->dtype));
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

#define MAX_SETTINGS 16

/* Everything a run has done so far: kept in the state for --resume. */
typedef struct run_log {
    int64_t epochs_done, steps_done;
    double elapsed_s;
    float *step_loss; /* [total steps] */
    float *epoch;     /* [epochs, LOG_COLS] */
} run_log;

static attn_status save_model(attn_ctx *ctx, const attn_module *m, const vit_meta *vm,
                              const char *path) {
    attn_st_writer *w;
    attn_status st = attn_st_writer_create(ctx, &w);
    if (st != ATTN_OK) return st;
    st = put_meta(w, vm);
    if (st == ATTN_OK) st = attn_module_save(ctx, m, w, NULL);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

/* The ViT's part of a checkpoint (the loop writes the model, optimiser, step and settings):
 * the model's config, the run's log. */
static attn_status describe_run(attn_st_writer *w, const vit_meta *vm, const run_log *lg) {
    attn_status st = put_meta(w, vm);
    if (st == ATTN_OK) st = meta_i(w, "epochs_done", lg->epochs_done);
    if (st == ATTN_OK) st = meta_i(w, "steps_done", lg->steps_done);
    if (st == ATTN_OK) st = meta_f(w, "elapsed_s", lg->elapsed_s);
    if (st == ATTN_OK && lg->steps_done > 0) {
        int64_t shape[1] = {lg->steps_done};
        st = attn_st_writer_add(w, "log.step_loss", ATTN_F32, 1, shape, lg->step_loss);
    }
    if (st == ATTN_OK && lg->epochs_done > 0) {
        int64_t shape[2] = {lg->epochs_done, LOG_COLS};
        st = attn_st_writer_add(w, "log.epochs", ATTN_F32, 2, shape, lg->epoch);
    }
    return st;
}

/* Reads a log tensor of exactly n floats (n == 0: absent) into dst. */
static int read_log(const char *path, attn_ctx *ctx, const attn_st *st, const char *name,
                    int64_t n, float *dst) {
    attn_st_tensor t;
    if (n == 0) return 1;
    if (attn_st_find(st, name, &t) != ATTN_OK || t.numel != n)
        return bad("train vit", path, "the tensor \"%s\" is missing or not of %lld values", name,
                   (long long)n);
    attn_status s = attn_st_to_f32(ctx, &t, dst, (size_t)n);
    if (s != ATTN_OK) return attn_cli_fail(ctx, "train vit", s), 0;
    return 1;
}

/* Mean loss and accuracy on a whole set, in batches of eb (buffers x [eb, R, C], lg [eb, K],
 * y [eb], idx [eb]); eval mode (no dropout). */
static attn_status evaluate(attn_ctx *ctx, const attn_module *m, const img_set *s,
                            const vit_meta *vm, int64_t eb, float *x, float *lg, int64_t *y,
                            int64_t *idx, double *loss, double *acc) {
    int64_t R = s->rows, K = vm->cfg.num_classes, right = 0;
    double sum = 0;
    for (int64_t i0 = 0; i0 < s->n; i0 += eb) {
        int64_t b = s->n - i0 < eb ? s->n - i0 : eb;
        for (int64_t i = 0; i < b; i++) idx[i] = i0 + i;
        img_batch(s, idx, b, NULL, 0, 0, vm->mean, vm->std, x, y);
        attn_tensor X = attn_view4(x, b, 1, R, R), L = attn_view2(lg, b, K);
        int64_t ts[1] = {b};
        attn_tensor Y = attn_tensor_make(y, ATTN_I64, 1, ts);
        float l;
        attn_status st = attn_vit_forward(ctx, m, &X, NULL, &L);
        if (st == ATTN_OK) st = attn_cross_entropy(ctx, &L, &Y, -100, 0.0f, &l, NULL);
        if (st != ATTN_OK) return st;
        sum += (double)l * (double)b;
        for (int64_t i = 0; i < b; i++) {
            const float *r = lg + i * K;
            int64_t best = 0;
            for (int64_t k = 1; k < K; k++)
                if (r[k] > r[best]) best = k;
            right += best == y[i];
        }
    }
    *loss = sum / (double)s->n;
    *acc = (double)right / (double)s->n;
    return ATTN_OK;
}

static int write_csv(attn_ctx *ctx, const char *path, const run_log *lg) {
    attn_file_out *f = NULL;
    attn_status st = attn_file_out_open(ctx, path, &f);
    char line[512];
    int n = snprintf(line, sizeof line, "epoch");
    for (int c = 0; c < LOG_COLS; c++) n += snprintf(line + n, sizeof line - (size_t)n, ",%s", log_names[c]);
    n += snprintf(line + n, sizeof line - (size_t)n, "\n");
    if (st == ATTN_OK) st = attn_file_out_write(f, line, (size_t)n);
    for (int64_t e = 0; st == ATTN_OK && e < lg->epochs_done; e++) {
        const float *r = lg->epoch + e * LOG_COLS;
        n = snprintf(line, sizeof line, "%lld,%.6f,%.6f,%.6f,%.6g,%.1f,%.1f,%.1f\n",
                     (long long)e + 1, (double)r[LOG_TRAIN_LOSS], (double)r[LOG_TEST_LOSS],
                     (double)r[LOG_TEST_ACC], (double)r[LOG_LR], (double)r[LOG_TRAIN_IPS],
                     (double)r[LOG_EVAL_IPS], (double)r[LOG_ELAPSED]);
        if (n < 0 || (size_t)n >= sizeof line) n = 0; /* cannot happen: bounded fields */
        st = attn_file_out_write(f, line, (size_t)n);
    }
    if (st == ATTN_OK) st = attn_file_out_commit(f);
    else attn_file_out_abort(f);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "train vit", st);
        return 0;
    }
    return 1;
}

/* The loss curve (a trailing mean over `win` steps, plotted at every step) and the test
 * accuracy at the end of each epoch. */
static attn_status write_svg(attn_ctx *ctx, const char *path, const run_log *lg, int64_t spe) {
    int64_t n = lg->steps_done, win = spe < 50 ? spe : 50;
    if (n < 1) return ATTN_OK;
    float *xs = malloc((size_t)n * sizeof(float)), *ys = malloc((size_t)n * sizeof(float));
    float vx[1024], vy[1024];
    if (!xs || !ys) {
        free(xs), free(ys);
        return ATTN_E_NOMEM;
    }
    double run = 0;
    for (int64_t i = 0; i < n; i++) {
        run += lg->step_loss[i];
        if (i >= win) run -= lg->step_loss[i - win];
        xs[i] = (float)(i + 1);
        ys[i] = (float)(run / (double)(i + 1 < win ? i + 1 : win));
    }
    int nv = 0;
    for (int64_t e = 0; e < lg->epochs_done && nv < 1024; e++, nv++) {
        vx[nv] = (float)((e + 1) * spe);
        vy[nv] = lg->epoch[e * LOG_COLS + LOG_TEST_ACC];
    }
    attn_status st = attn_cli_loss_curve_svg(ctx, path, xs, ys, (int)(n < 1000000 ? n : 1000000),
                                             vx, vy, nv, "test accuracy",
                                             "attn train vit: training loss and test accuracy");
    free(xs), free(ys);
    return st;
}

/* ---- the ViT as a task of the one training loop (attn_train_run) ------------------------- */
typedef struct vit_task {
    attn_ctx *ctx;
    attn_module *m;
    const train_opts *o;
    const img_set *tr, *te;
    const vit_meta *vm;
    img_aug aug;
    int64_t n, B, spe, EB, last_epoch;
    float *x, *lg, *dlg;
    int64_t *y, *perm, *idx, perm_epoch, rows;
    run_log *log;
    const char *csv;
    const attn_cli_paths *paths;
    int tty;
    double t_start, elapsed0, train_time, eval_time, last_print, t_mark;
    int64_t images_seen, evals, steps_run;
    attn_status io; /* a failure writing the per-epoch files */
} vit_task;

/* The images of step g: batch s of epoch e of the shuffled training set; share `share` of
 * `shares` takes its rows [share b / shares, (share + 1) b / shares). */
static int64_t step_rows(const vit_task *t, int64_t g) {
    int64_t s = g % t->spe;
    return t->n - s * t->B < t->B ? t->n - s * t->B : t->B;
}
static attn_status vit_forward(void *user, attn_ctx *ctx, int64_t g, int share, int shares,
                               attn_saved *sv, attn_train_share *out) {
    vit_task *t = user;
    const int64_t e = g / t->spe, s = g % t->spe, b = step_rows(t, g), R = t->tr->rows;
    const int64_t K = t->vm->cfg.num_classes;
    const int64_t lo = b * share / shares, hi = b * (share + 1) / shares, rows = hi - lo;
    if (t->perm_epoch != e) img_shuffle((uint64_t)t->o->seed, (uint64_t)e, t->n, t->perm);
    t->perm_epoch = e;
    t->rows = rows;
    out->count = (double)rows, out->count_step = (double)b, out->items = (double)rows;
    if (rows == 0) return ATTN_OK;
    img_batch(t->tr, t->perm + s * t->B + lo, rows, t->o->no_augment ? NULL : &t->aug,
              (uint64_t)t->o->seed, (uint64_t)e, t->vm->mean, t->vm->std, t->x, t->y);
    attn_tensor X = attn_view4(t->x, rows, 1, R, R), L = attn_view2(t->lg, rows, K),
                DL = attn_view2(t->dlg, rows, K);
    int64_t ts[1] = {rows};
    attn_tensor Y = attn_tensor_make(t->y, ATTN_I64, 1, ts);
    attn_run run = {t->o->dropout > 0, (uint64_t)t->o->seed, (uint64_t)g << 16};
    attn_status st = attn_vit_forward_train(ctx, t->m, &X, &run, &L, sv);
    if (st != ATTN_OK) return st;
    return attn_cross_entropy(ctx, &L, &Y, -100, (float)t->o->smoothing, &out->loss, &DL);
}
static attn_status vit_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    vit_task *t = user;
    const int64_t K = t->vm->cfg.num_classes;
    if (t->rows == 0) return ATTN_OK;
    if (scale != 1.0f)
        for (int64_t i = 0; i < t->rows * K; i++) t->dlg[i] *= scale;
    attn_tensor DL = attn_view2(t->dlg, t->rows, K);
    return attn_vit_backward_saved(ctx, t->m, sv, &DL, NULL);
}

/* The training loss of epoch e so far (steps [e spe, g]): a mean over its images. */
static double epoch_loss(const vit_task *t, int64_t e, int64_t g, int64_t *images) {
    double sum = 0;
    int64_t k = 0;
    for (int64_t h = e * t->spe; h <= g; h++) {
        int64_t b = step_rows(t, h);
        sum += (double)t->log->step_loss[h] * (double)b;
        k += b;
    }
    *images = k;
    return k ? sum / (double)k : 0.0;
}

/* After an epoch's last step: the test set, the epoch's row of the log, its files. */
static attn_status vit_evaluate(void *user, attn_ctx *ctx, int64_t step, attn_train_progress *p,
                                int *stop) {
    vit_task *t = user;
    (void)stop;
    t->log->step_loss[step - 1] = p->loss;
    t->log->steps_done = step;
    if (step % t->spe != 0) return ATTN_OK; /* stopped inside an epoch: no test pass */
    const int64_t e = step / t->spe - 1;
    int64_t seen;
    double t_ev = now_s(), tl, ta, tr_loss = epoch_loss(t, e, step - 1, &seen);
    double t_tr = t_ev - t->t_mark;
    t->train_time += t_tr;
    attn_status st = evaluate(ctx, t->m, t->te, t->vm, t->EB, t->x, t->lg, t->y, t->idx, &tl, &ta);
    if (st != ATTN_OK) return st;
    t_ev = now_s() - t_ev;
    t->eval_time += t_ev;
    t->evals++;
    float *row = t->log->epoch + e * LOG_COLS;
    row[LOG_TRAIN_LOSS] = (float)tr_loss;
    row[LOG_TEST_LOSS] = (float)tl;
    row[LOG_TEST_ACC] = (float)ta;
    row[LOG_LR] = p->lr;
    row[LOG_TRAIN_IPS] = (float)((double)t->n / t_tr);
    row[LOG_EVAL_IPS] = (float)((double)t->te->n / t_ev);
    t->log->elapsed_s = t->elapsed0 + now_s() - t->t_start;
    row[LOG_ELAPSED] = (float)t->log->elapsed_s;
    t->log->epochs_done = e + 1;
    p->accuracy = (float)ta, p->eval_loss = (float)tl;
    if (!t->o->quiet) {
        char el[16];
        attn_cli_fmt_time(t->log->elapsed_s, el, sizeof el);
        fprintf(stderr, "%sepoch %lld/%lld  train loss %.4f  test loss %.4f  test accuracy "
                        "%.2f%%  (%.0f img/s training, %.0f img/s test)  %s elapsed\n",
                t->tty ? "\r\033[K" : "", (long long)e + 1, t->o->epochs,
                (double)row[LOG_TRAIN_LOSS], tl, 100 * ta, (double)row[LOG_TRAIN_IPS],
                (double)row[LOG_EVAL_IPS], el);
        fflush(stderr);
    }
    if ((st = save_model(ctx, t->m, t->vm, t->paths->model)) != ATTN_OK) return st;
    if (!write_csv(ctx, t->csv, t->log)) return ATTN_E_IO;
    if ((st = write_svg(ctx, t->paths->svg, t->log, t->spe)) != ATTN_OK) return st;
    t->t_mark = now_s();
    return ATTN_OK;
}

static attn_status vit_describe(void *user, attn_ctx *ctx, attn_st_writer *w) {
    vit_task *t = user;
    (void)ctx;
    return describe_run(w, t->vm, t->log);
}

/* After every step: the progress line (at most one a second). */
static int vit_progress(void *user, const attn_train_progress *p) {
    vit_task *t = user;
    const int64_t g = p->step - 1, e = g / t->spe, s = g % t->spe;
    t->log->step_loss[g] = p->loss;
    t->log->steps_done = p->step;
    t->images_seen += step_rows(t, g);
    t->steps_run++;
    double now = now_s();
    if (!t->o->quiet && (now - t->last_print >= 1.0 || s == t->spe - 1) && !p->evaluated) {
        t->last_print = now;
        int64_t seen;
        double mean = epoch_loss(t, e, g, &seen), tt = t->train_time + (now - t->t_mark);
        double ips = tt > 0 ? (double)t->images_seen / tt : 0;
        /* the rest: training at this speed, and the test passes at theirs (until the first,
         * guessed at three times the training speed) */
        double eval_ips = t->evals ? (double)(t->evals * t->te->n) / t->eval_time : 3 * ips;
        double rest = ips > 0 ? (double)((t->last_epoch - e) * t->n - seen) / ips +
                                    (double)((t->last_epoch - e) * t->te->n) / eval_ips
                              : 0;
        char el[16], eta[16];
        attn_cli_fmt_time(t->elapsed0 + now - t->t_start, el, sizeof el);
        attn_cli_fmt_time(rest, eta, sizeof eta);
        fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.2e  %5.0f "
                        "img/s  %s elapsed  ETA %s%s",
                t->tty ? "\r\033[K" : "", (long long)e + 1, t->o->epochs, (long long)s + 1,
                (long long)t->spe, mean, (double)p->lr, ips, el, eta, t->tty ? "" : "\n");
        fflush(stderr);
    }
    return attn_cli_stop_requested();
}

int attn_cmd_vit_train(int argc, char **argv) {
    const char *cmd = "train vit";
    /* the defaults: about 8 minutes on 2 threads of the Xeon this was written on (README) */
    train_opts o = {VIT_DEFAULT_DATA, "vit-model", NULL, 7, 4, 96, 4, 192, 20, 128, 200, 1, 0, 0, 0,
                    0, 1, 256, 2e-3, 0.05, 0.0, 1.0, 0.0, ATTN_CLI_DTYPE_AUTO, 0, 0, 0, 0};
    int npos;
    attn_cli_train_common tc = {NULL, 1, 0, NULL};
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("data", 0, &o.data, "DIR",
                     "the Fashion-MNIST (or MNIST) folder: train-images-idx3-ubyte,\n"
                     "train-labels-idx1-ubyte, t10k-... (each may be .gz)\n"
                     "(default " VIT_DEFAULT_DATA ")"),
        ATTN_OPT_STR("out", 'o', &o.out, "DIR",
                     "where to write model.safetensors, state.safetensors,\n"
                     "log.csv and loss.svg (default: vit-model)"),
        ATTN_OPT_STR("output", 0, &o.out, "DIR", NULL),
        ATTN_OPT_INT("patch", 0, &o.patch, 1, 4096, "P",
                     "patch side in pixels (default 7: 4x4 patches of 28x28)"),
        ATTN_OPT_INT("layers", 0, &o.layers, 1, 1024, "N", "encoder layers (default 4)"),
        ATTN_OPT_INT("dim", 0, &o.dim, 1, 65536, "E", "model width (default 96)"),
        ATTN_OPT_INT("heads", 0, &o.heads, 1, 1024, "H", "attention heads (default 4)"),
        ATTN_OPT_INT("ffn", 0, &o.ffn, 1, 1 << 20, "F", "feed-forward width (default 192)"),
        ATTN_OPT_INT("epochs", 0, &o.epochs, 1, 100000, "K", "passes over the training set "
                                                             "(default 20)"),
        ATTN_OPT_INT("batch", 0, &o.batch, 1, 65536, "B", "images per step (default 128)"),
        ATTN_OPT_NUM("lr", 0, &o.lr, 1e-7, 10, "LR", "peak learning rate (default 2e-3)"),
        ATTN_OPT_INT("warmup", 0, &o.warmup, 0, 100000000, "STEPS",
                     "linear warmup steps, then cosine decay to 0 (default 200)"),
        ATTN_OPT_NUM("weight-decay", 0, &o.wd, 0, 10, "WD", "AdamW weight decay (default 0.05)"),
        ATTN_OPT_NUM("dropout", 0, &o.dropout, 0, 0.99, "P", "dropout probability (default 0)"),
        ATTN_OPT_NUM("clip", 0, &o.clip, 0, 1e9, "X",
                     "clip the gradient's global L2 norm to X (default 1; 0: off)"),
        ATTN_OPT_NUM("label-smoothing", 0, &o.smoothing, 0, 0.99, "X",
                     "label smoothing of the loss (default 0)"),
        ATTN_OPT_FLAG("no-augment", 0, &o.no_augment,
                      "no augmentation (default: a random crop of the image\n"
                      "padded by --pad pixels, and a horizontal flip half the\n"
                      "time)"),
        ATTN_OPT_INT("pad", 0, &o.pad, 0, 64, "N",
                     "the augmentation's crop padding (default 1; 0: flips only)"),
        ATTN_OPT_INT("seed", 0, &o.seed, 0, 1LL << 62, "S",
                     "everything random follows from it (default 1)"),
        ATTN_OPT_INT("limit", 0, &o.limit, 0, 1LL << 40, "N",
                     "use only the first N training images (default 0: all)"),
        ATTN_OPT_INT("test-limit", 0, &o.test_limit, 0, 1LL << 40, "N",
                     "test on the first N test images only (default 0: all)"),
        ATTN_OPT_STR("save-init", 0, &o.save_init, "FILE",
                     "also write the initial weights (before the first step)\n"
                     "to FILE, as model.safetensors (for a twin in another\n"
                     "framework)"),
        ATTN_OPT_INT("eval-batch", 0, &o.eval_batch, 1, 65536, "N",
                     "images per forward pass of the test (default 256; the\n"
                     "results do not depend on it)"),
        ATTN_OPT_CHOICE("dtype", 0, &o.dtype, ATTN_CLI_DTYPE_CHOICES, "T", ATTN_CLI_DTYPE_HELP),
        ATTN_OPT_THREADS(&o.threads),
        ATTN_OPT_FLAG("resume", 0, &o.resume,
                      "continue the run whose state.safetensors is in the output\n"
                      "folder (same settings); ends as the uninterrupted run would"),
        ATTN_OPT_INT("stop-after", 0, &o.stop_after, 0, 100000, "K",
                     "stop after epoch K (the schedule still spans --epochs;\n"
                     "continue with --resume)"),
        ATTN_OPT_TRAIN_COMMON(&tc, "checkpoint every N steps as well as after every epoch\n"
                              "(default 0: after every epoch only)"),
        ATTN_OPT_FLAG("quiet", 'q', &o.quiet, "no progress lines on stderr"),
        ATTN_OPT_FLAG("json", 0, &o.json, "print the summary as one JSON object"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "train vit", "attn train vit [options]",
        "Trains a Vision Transformer (ViT) to classify Fashion-MNIST's 28x28 images of\n"
        "clothes into 10 classes: patches of PxP pixels, a [CLS] token, learned positions,\n"
        "pre-norm encoder layers with GELU, a linear head.  Reports the accuracy on the\n"
        "10,000 test images after each epoch.  The same settings give the same model\n"
        "whatever --threads is.  Then: attn classify, attn attention-map.",
        opts,
        "Writes, after every epoch: DIR/model.safetensors (the config in its metadata),\n"
        "DIR/state.safetensors (model, optimiser, epoch, for --resume), DIR/log.csv (one\n"
        "line per epoch) and DIR/loss.svg (training loss and test accuracy).",
        "attn train vit -o vit-model\n"
        "attn train vit --epochs 2 --layers 2 --dim 64 --ffn 128 -o small\n"
        "attn train vit --resume -o vit-model\n"
        "attn train vit --limit 256 --epochs 1 --dim 16 --heads 2 --ffn 32 --layers 1 -o tiny"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (o.save_init && o.resume)
        return attn_cli_usage_error(&spec, "--save-init is for a new run, not with --resume");
    if (o.dim % o.heads != 0)
        return attn_cli_usage_error(&spec, "--heads %lld must divide --dim %lld", o.heads, o.dim);

    /* the data first: nothing is created before it is read */
    img_set tr, te;
    char err[1024];
    memset(&tr, 0, sizeof tr), memset(&te, 0, sizeof te);
    if (img_mnist_load(o.data, 1, o.limit, &tr, err, sizeof err) ||
        img_mnist_load(o.data, 0, o.test_limit, &te, err, sizeof err)) {
        fprintf(stderr, "attn %s: %s\n", cmd, err);
        img_set_free(&tr);
        return 1;
    }
    int rc = 1;
    attn_ctx *ctx = NULL;
    attn_module *m = NULL;
    attn_st *rs = NULL;
    float *x = NULL, *lg = NULL, *dlg = NULL;
    int64_t *y = NULL, *perm = NULL, *idx = NULL;
    run_log log = {0, 0, 0, NULL, NULL};
    attn_status st = ATTN_OK;
    const int64_t R = tr.rows, K = VIT_CLASSES;
    if (tr.rows != tr.cols || te.rows != tr.rows || te.cols != tr.cols) {
        fprintf(stderr, "attn %s: the images must be square and of one size (training %lldx%lld, "
                        "test %lldx%lld)\n", cmd, (long long)tr.cols, (long long)tr.rows,
                (long long)te.cols, (long long)te.rows);
        goto out;
    }
    if (!tr.labels || !te.labels || tr.num_classes > K || te.num_classes > K) {
        fprintf(stderr, "attn %s: the labels must be 0..%lld (Fashion-MNIST's classes); %s has "
                        "label %d\n", cmd, (long long)K - 1, o.data,
                (tr.num_classes > te.num_classes ? tr.num_classes : te.num_classes) - 1);
        goto out;
    }
    if (R % o.patch != 0) {
        fprintf(stderr, "attn %s: --patch %lld does not divide the image size %lld\n", cmd,
                o.patch, (long long)R);
        goto out;
    }
    attn_cli_paths paths;
    char csv[4200];
    if (attn_cli_train_dir(cmd, o.out, &paths)) goto out;
    snprintf(csv, sizeof csv, "%s/log.csv", o.out);
    const int dtype_asked = o.dtype;
    if (attn_cli_ctx_dtype(cmd, o.threads, o.quiet, &o.dtype, &ctx)) goto out;

    vit_meta vm;
    vm.cfg = vit_config(R, o.patch, o.dim, o.heads, o.ffn, o.layers, (float)o.dropout);
    vm.mean = IMG_FASHION_MEAN, vm.std = IMG_FASHION_STD;
    attn_train_setting set[MAX_SETTINGS];
    int nset = settings(&o, &tr, set);
    const int64_t n = tr.n, B = o.batch < n ? o.batch : n, spe = (n + B - 1) / B,
                  total = spe * o.epochs, EB = o.eval_batch;
    if (!(x = malloc((size_t)((B > EB ? B : EB) * R * R) * sizeof(float))) ||
        !(lg = malloc((size_t)((B > EB ? B : EB) * K) * sizeof(float))) ||
        !(dlg = malloc((size_t)(B * K) * sizeof(float))) ||
        !(y = malloc((size_t)(B > EB ? B : EB) * sizeof(int64_t))) ||
        !(idx = malloc((size_t)EB * sizeof(int64_t))) ||
        !(perm = malloc((size_t)n * sizeof(int64_t))) ||
        !(log.step_loss = calloc((size_t)total, sizeof(float))) ||
        !(log.epoch = calloc((size_t)(o.epochs * LOG_COLS), sizeof(float)))) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        goto out;
    }
    if ((st = attn_vit_create(ctx, &vm.cfg, &m)) != ATTN_OK ||
        (st = attn_module_init(ctx, m, (uint64_t)o.seed)) != ATTN_OK ||
        (st = attn_module_enable_grad(ctx, m)) != ATTN_OK)
        goto fail;

    if (o.resume) {
        vit_meta saved;
        struct stat sb;
        if (stat(paths.state, &sb) != 0) {
            fprintf(stderr, "attn %s: --resume: %s: %s (no earlier run to continue)\n", cmd,
                    paths.state, strerror(errno));
            goto out;
        }
        if ((st = attn_st_read_file(ctx, paths.state, &rs)) != ATTN_OK) goto fail;
        if (!read_meta(cmd, paths.state, ctx, rs, "model.", &saved)) goto out;
        if (saved.cfg.image_size != vm.cfg.image_size || saved.cfg.patch != vm.cfg.patch ||
            saved.cfg.tf.d_model != vm.cfg.tf.d_model || saved.cfg.tf.nhead != vm.cfg.tf.nhead ||
            saved.cfg.tf.num_encoder_layers != vm.cfg.tf.num_encoder_layers ||
            saved.cfg.tf.dim_feedforward != vm.cfg.tf.dim_feedforward ||
            saved.cfg.tf.dropout != vm.cfg.tf.dropout) {
            fprintf(stderr, "attn %s: --resume: %s holds another model (--patch %lld --layers "
                            "%lld --dim %lld --heads %lld --ffn %lld --dropout %g); give the "
                            "same options\n", cmd, paths.state, (long long)saved.cfg.patch,
                    (long long)saved.cfg.tf.num_encoder_layers, (long long)saved.cfg.tf.d_model,
                    (long long)saved.cfg.tf.nhead, (long long)saved.cfg.tf.dim_feedforward,
                    (double)saved.cfg.tf.dropout);
            goto out;
        }
        if (attn_cli_dtype_resume(ctx, rs, dtype_asked, &o.dtype)) nset = settings(&o, &tr, set);
        float el;
        if (!get_i(cmd, paths.state, rs, "epochs_done", 0, o.epochs, &log.epochs_done) ||
            !get_i(cmd, paths.state, rs, "steps_done", 0, total, &log.steps_done) ||
            !get_f(cmd, paths.state, rs, "elapsed_s", 0, 1e12, &el))
            goto out;
        log.elapsed_s = el;
        if (log.epochs_done != log.steps_done / spe) { /* a run stopped inside an epoch */
            bad(cmd, paths.state, "steps_done %lld is not in epoch epochs_done + 1 = %lld of "
                "%lld steps", (long long)log.steps_done, (long long)log.epochs_done + 1,
                (long long)spe);
            goto out;
        }
        if (!read_log(paths.state, ctx, rs, "log.step_loss", log.steps_done, log.step_loss) ||
            !read_log(paths.state, ctx, rs, "log.epochs", log.epochs_done * LOG_COLS, log.epoch))
            goto out;
    }

    if (o.save_init && !o.resume && (st = save_model(ctx, m, &vm, o.save_init)) != ATTN_OK)
        goto fail;

    int tty = !o.quiet && isatty(2);
    if (!o.quiet) {
        fprintf(stderr, "training vit: %lldx%lld images, patch %lld (%lld patches), dim %lld, "
                        "%lld heads, %lld layers, ffn %lld, %lld parameters\n",
                (long long)R, (long long)R, o.patch, (R / o.patch) * (R / o.patch), o.dim,
                o.heads, o.layers, o.ffn, (long long)attn_module_numel(m));
        fprintf(stderr, "data: %lld training images, %lld test images; batch %lld, %lld steps "
                        "per epoch, %lld epochs; %s, %d threads\n",
                (long long)n, (long long)te.n, (long long)B, (long long)spe, o.epochs,
                attn_cli_dtype_name(o.dtype), attn_ctx_threads(ctx));
        if (log.epochs_done)
            fprintf(stderr, "resuming after epoch %lld of %lld\n", (long long)log.epochs_done,
                    o.epochs);
    }
    const double t_start = now_s(), elapsed0 = log.elapsed_s;
    int64_t last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    vit_task vt;
    memset(&vt, 0, sizeof vt);
    vt.ctx = ctx, vt.m = m, vt.o = &o, vt.tr = &tr, vt.te = &te, vt.vm = &vm;
    vt.aug.pad = (int)o.pad, vt.aug.flip = 1;
    vt.n = n, vt.B = B, vt.spe = spe, vt.EB = EB, vt.last_epoch = last_epoch;
    vt.x = x, vt.lg = lg, vt.dlg = dlg, vt.y = y, vt.perm = perm, vt.idx = idx;
    vt.perm_epoch = -1, vt.log = &log, vt.csv = csv, vt.paths = &paths, vt.tty = tty;
    vt.t_start = t_start, vt.elapsed0 = elapsed0, vt.last_print = -1, vt.t_mark = t_start;
    attn_train_task task = {"vit", "images", m, &vt, vit_forward, vit_backward, vit_evaluate,
                            vit_describe, set, nset};
    attn_train_options to = attn_train_defaults();
    to.steps = total, to.warmup = o.warmup, to.lr = (float)o.lr, to.lr_min = 0.0f;
    to.weight_decay = (float)o.wd, to.clip = (float)o.clip, to.accum = (int)tc.accum;
    to.eval_every = spe, to.stop_at = last_epoch * spe, to.state_path = paths.state;
    to.save_every = tc.save_every > 0 ? tc.save_every : spe;
    to.log_path = attn_cli_train_log(&tc, &paths), to.resume_name = paths.state;
    to.tb_dir = attn_cli_train_tb(&tc);
    to.progress = vit_progress, to.user = &vt;
    attn_train_result res;
    attn_cli_stop_on_signals();
    st = attn_train_run(ctx, &task, &to, rs, &res);
    attn_st_free(rs);
    rs = NULL;
    if (st != ATTN_OK) {
        if (st == ATTN_E_NONFINITE && !o.quiet && tty) fputc('\n', stderr);
        if (st == ATTN_E_NONFINITE) {
            fprintf(stderr, "attn %s: %s\n", cmd, attn_ctx_errmsg(ctx));
            goto out;
        }
        goto fail;
    }
    const double train_time = vt.train_time, eval_time = vt.eval_time;
    const int64_t images_seen = vt.images_seen, evals = vt.evals;
    if (log.epochs_done == 0 || (o.resume && evals == 0)) { /* nothing trained here */
        if ((st = save_model(ctx, m, &vm, paths.model)) != ATTN_OK) goto fail;
        if (!write_csv(ctx, csv, &log)) goto out;
        if ((st = write_svg(ctx, paths.svg, &log, spe)) != ATTN_OK) goto fail;
    }

    /* the summary */
    int64_t E = log.epochs_done;
    const float *last = E ? log.epoch + (E - 1) * LOG_COLS : NULL;
    double tr_ips = train_time > 0 ? (double)images_seen / train_time : 0,
           ev_ips = eval_time > 0 ? (double)(evals * te.n) / eval_time : 0;
    if (o.json) {
        printf("{\"epochs_done\": %lld, \"epochs\": %lld, \"threads\": %d, \"dtype\": \"%s\", "
               "\"parameters\": %lld, \"train_images\": %lld, \"test_images\": %lld, "
               "\"elapsed_s\": %.1f, \"train_images_per_s\": %.1f, \"eval_images_per_s\": %.1f, "
               "\"test_accuracy\": %.6f, \"log\": [",
               (long long)E, o.epochs, attn_ctx_threads(ctx), attn_cli_dtype_name(o.dtype),
               (long long)attn_module_numel(m), (long long)n, (long long)te.n, log.elapsed_s,
               tr_ips, ev_ips, last ? (double)last[LOG_TEST_ACC] : 0.0);
        for (int64_t e = 0; e < E; e++) {
            printf("%s{\"epoch\": %lld", e ? ", " : "", (long long)e + 1);
            for (int c = 0; c < LOG_COLS; c++)
                printf(", \"%s\": %.6g", log_names[c], (double)log.epoch[e * LOG_COLS + c]);
            printf("}");
        }
        printf("], \"model\": ");
        json_str(stdout, paths.model);
        printf(", \"state\": ");
        json_str(stdout, paths.state);
        printf(", \"log_csv\": ");
        json_str(stdout, csv);
        printf(", \"plot\": ");
        json_str(stdout, paths.svg);
        printf("}\n");
    } else {
        if (last) {
            char el[16];
            attn_cli_fmt_time(log.elapsed_s, el, sizeof el);
            printf("test accuracy: %.2f%% after epoch %lld of %lld (test loss %.4f)\n",
                   100 * (double)last[LOG_TEST_ACC], (long long)E, o.epochs,
                   (double)last[LOG_TEST_LOSS]);
            printf("time: %s (%.0f images/s training, %.0f images/s test; %d thread%s, %s)\n", el,
                   tr_ips, ev_ips, attn_ctx_threads(ctx), attn_ctx_threads(ctx) == 1 ? "" : "s",
                   attn_cli_dtype_name(o.dtype));
        }
        if (res.end == ATTN_TRAIN_STOPPED)
            printf("stopped by a signal at step %lld (epoch %lld): continue with --resume -o "
                   "%s\n", (long long)res.step, (long long)(res.step / spe) + 1, o.out);
        else if (E < o.epochs)
            printf("stopped after epoch %lld of %lld: continue with --resume -o %s\n",
                   (long long)E, o.epochs, o.out);
        printf("model: %s\nstate: %s\nlog: %s\nplot: %s\n", paths.model, paths.state, csv,
               paths.svg);
    }
    rc = 0;
    goto out;
fail:
    if (!o.quiet && isatty(2)) fputc('\n', stderr);
    rc = attn_cli_fail(ctx, cmd, st);
out:
    free(x), free(lg), free(dlg), free(y), free(idx), free(perm);
    free(log.step_loss), free(log.epoch);
    attn_st_free(rs);
    attn_module_free(m);
    attn_ctx_free(ctx);
    img_set_free(&tr);
    img_set_free(&te);
    return rc;
}

/* ---- what classify and attention-map share: the model and the image(s) they read --------- */
typedef struct vit_src {
    const char *model, *data;
    long long index, threads;
    int test, train;
} vit_src;

#define VIT_SRC_INIT {NULL, VIT_DEFAULT_DATA, -1, 0, 0, 0}
/* The options of a vit_src `s`; verb names what the command does with image N. */
#define VIT_SRC_OPTS(s, verb)                                                                 \
    ATTN_OPT_STR("model", 0, &(s).model, "DIR",                                               \
                 "the output folder of 'attn train vit' (or its\n"                            \
                 "model.safetensors); required"),                                             \
        ATTN_OPT_STR("data", 0, &(s).data, "DIR",                                             \
                     "the folder of --index's images (default\n" VIT_DEFAULT_DATA ")"),       \
        ATTN_OPT_INT("index", 0, &(s).index, 0, 1LL << 40, "N",                               \
                     verb " image N of the test set (or of --train's)"),                      \
        ATTN_OPT_FLAG("test", 0, &(s).test, "--index counts in the test set (the default)"),  \
        ATTN_OPT_FLAG("train", 0, &(s).train, "--index counts in the training set"),          \
        ATTN_OPT_THREADS(&(s).threads)

/* The checks both commands make after parsing (npos image files, at most max_files; files
 * names them in the message): 0 when fine, else the usage error's exit status. */
static int vit_src_check(const attn_cli_spec *spec, const vit_src *s, int npos, int max_files,
                         const char *files) {
    char msg[96];
    if (!s->model) return attn_cli_usage_error(spec, "--model DIR is required");
    if (s->test && s->train)
        return attn_cli_usage_error(spec, "--test and --train exclude each other");
    if (npos > max_files) return attn_cli_usage_error(spec, "one image at a time");
    snprintf(msg, sizeof msg, "give either --index N or %s", files);
    if ((s->index >= 0) == (npos > 0)) return attn_cli_usage_error(spec, msg);
    if ((s->test || s->train) && s->index < 0)
        return attn_cli_usage_error(spec, "--test and --train go with --index");
    return 0;
}

/* The context and the model of s: 1, or 0 after printing the problem (nothing left open). */
static int vit_src_open(const char *cmd, const vit_src *s, attn_ctx **ctx, vit_model *v) {
    if (attn_cli_ctx(cmd, s->threads, 0, ctx)) return 0;
    if (load_model(cmd, *ctx, s->model, v)) return 1;
    attn_ctx_free(*ctx);
    return 0;
}

/* ---- attn classify ----------------------------------------------------------------------- */
int attn_cmd_classify(int argc, char **argv) {
    const char *cmd = "classify";
    vit_src src = VIT_SRC_INIT;
    long long top = 5;
    int json = 0, npos;
    const attn_cli_opt opts[] = {
        VIT_SRC_OPTS(src, "classify"),
        ATTN_OPT_INT("top", 0, &top, 1, 1000, "K", "the K most likely classes (default 5)"),
        ATTN_OPT_FLAG("json", 0, &json, "one JSON object per image"), ATTN_OPT_END};
    const attn_cli_spec spec = {
        "classify", "attn classify --model DIR --index N [--test|--train] [options]\n"
                    "attn classify --model DIR [options] IMAGE.pgm|IMAGE.png...",
        "Classifies Fashion-MNIST images with a model of 'attn train vit': prints the\n"
        "5 most likely classes with their probabilities.  An image file (PGM or PNG,\n"
        "grayscale or colour, turned to gray) must be the model's size (28x28), white\n"
        "garment on black as in the data set.",
        opts, NULL,
        "attn classify --model vit-model --index 0\n"
        "attn classify --model vit-model --index 7 --train --json\n"
        "attn classify --model vit-model shoe.pgm shirt.png"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if ((r = vit_src_check(&spec, &src, npos, INT_MAX, "image files")) != 0) return r;
    attn_ctx *ctx;
    vit_model v;
    int rc = 1;
    if (!vit_src_open(cmd, &src, &ctx, &v)) return 1;
    const char *data = src.data;
    long long index = src.index;
    int train = src.train;
    int64_t K = v.vm.cfg.num_classes, T = top < K ? top : K;
    float *logits = malloc((size_t)K * sizeof(float));
    double *p = malloc((size_t)K * sizeof(double));
    int *used = malloc((size_t)K * sizeof(int));
    if (!logits || !p || !used) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        goto out;
    }
    rc = 0;
    int count = index >= 0 ? 1 : npos;
    for (int i = 0; i < count && !ferror(stdout); i++) {
        vit_input in;
        int ok = index >= 0 ? input_index(cmd, data, train, index, &v, &in)
                            : input_file(cmd, argv[1 + i], &v, &in);
        if (!ok) {
            rc = 1;
            continue;
        }
        attn_status st = predict(ctx, &v, &in, logits, p);
        if (st != ATTN_OK) {
            rc = attn_cli_fail(ctx, cmd, st);
            input_free(&in);
            continue;
        }
        char nb[32], lb[32];
        if (json) {
            printf("{");
            if (in.file) {
                printf("\"file\": ");
                json_str(stdout, in.file);
            } else {
                printf("\"index\": %lld, \"set\": \"%s\"", (long long)in.index,
                       train ? "train" : "test");
            }
            if (in.label >= 0) {
                printf(", \"label\": %d, \"label_name\": ", in.label);
                json_str(stdout, class_name(in.label, K, lb, sizeof lb));
            }
            printf(", \"top\": [");
        } else if (in.file) {
            printf("%s\n", in.file);
        } else {
            printf("%s image %lld", train ? "training" : "test", (long long)in.index);
            if (in.label >= 0) printf(" (label: %s)", class_name(in.label, K, lb, sizeof lb));
            printf("\n");
        }
        for (int64_t k = 0; k < K; k++) used[k] = 0;
        for (int64_t t = 0; t < T; t++) {
            int64_t b = -1;
            for (int64_t k = 0; k < K; k++)
                if (!used[k] && (b < 0 || p[k] > p[b])) b = k;
            used[b] = 1;
            const char *name = class_name(b, K, nb, sizeof nb);
            if (json) {
                printf("%s{\"class\": %lld, \"name\": ", t ? ", " : "", (long long)b);
                json_str(stdout, name);
                printf(", \"p\": %.6f}", p[b]);
            } else {
                printf("  %6.2f%%  %s\n", 100 * p[b], name);
            }
        }
        if (json) printf("]}\n");
        input_free(&in);
    }
out:
    free(logits), free(p), free(used);
    vit_model_free(&v);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn attention-map ------------------------------------------------------------------ */
/* The head-averaged attention matrices [NL, L, L] of every layer for one image, through the
 * layers' own modules (attn_vit_attention gives only the [CLS] rows): the embedding
 * (attn_vit_embed), then per layer the self-attention of norm1(x) (attn_mha_forward with its
 * weights averaged over the heads) and the whole layer (attn_encoder_layer_forward). */
static attn_status full_attention(attn_ctx *ctx, const vit_model *v, const float *img,
                                  float *W) {
    const attn_vit_config *c = &v->vm.cfg;
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
    snprintf(pre, sizeof pre, "%sembed.", v->prefix);
    if ((st = attn_vit_embed_create(ctx, P, E, N, &emb)) != ATTN_OK ||
        (st = attn_module_load(ctx, emb, v->st, pre, 1)) != ATTN_OK)
        goto done;
    attn_tensor Pt = attn_view3(pt, 1, N, P), X = attn_view3(x, 1, L, E);
    if ((st = attn_vit_embed_forward(ctx, emb, &Pt, &X)) != ATTN_OK) goto done;
    attn_mha_config mc = attn_mha_defaults(E, c->tf.nhead);
    mc.dropout = 0;
    for (int64_t i = 0; i < NL; i++) {
        attn_module_free(layer), attn_module_free(mha);
        layer = mha = NULL;
        snprintf(pre, sizeof pre, "%slayers.%lld.", v->prefix, (long long)i);
        if ((st = attn_encoder_layer_create(ctx, &c->tf, &layer)) != ATTN_OK ||
            (st = attn_module_load(ctx, layer, v->st, pre, 1)) != ATTN_OK)
            goto done;
        snprintf(pre, sizeof pre, "%slayers.%lld.self_attn.", v->prefix, (long long)i);
        if ((st = attn_mha_create(ctx, &mc, &mha)) != ATTN_OK ||
            (st = attn_module_load(ctx, mha, v->st, pre, 1)) != ATTN_OK)
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
        fprintf(stderr, "attn attention-map: out of memory\n");
    attn_module_free(emb), attn_module_free(layer), attn_module_free(mha);
    free(pt), free(x), free(x2), free(nx), free(o);
    return st;
}

/* Attention rollout (Abnar & Zuidema 2020): per layer A = W + I with its rows renormalised,
 * multiplied through the layers (the last on the left); roll [N] receives the [CLS] row over
 * the patches.  W [NL, L, L]. */
static int rollout(const float *W, int64_t NL, int64_t L, float *roll) {
    double *Rm = malloc((size_t)(L * L) * sizeof(double)),
           *A = malloc((size_t)(L * L) * sizeof(double)),
           *T = malloc((size_t)(L * L) * sizeof(double));
    if (!Rm || !A || !T) {
        free(Rm), free(A), free(T);
        return 0;
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
    return 1;
}

int attn_cmd_attention_map(int argc, char **argv) {
    const char *cmd = "attention-map", *out = "attention.png";
    vit_src src = VIT_SRC_INIT;
    int npos;
    const attn_cli_opt opts[] = {
        VIT_SRC_OPTS(src, "draw"),
        ATTN_OPT_STR("output", 'o', &out, "OUT.png",
                     "where to write the picture (default attention.png)"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "attention-map", "attn attention-map --model DIR --index N [--test|--train] [-o OUT.png]\n"
                         "attn attention-map --model DIR [-o OUT.png] IMAGE.pgm|IMAGE.png",
        "Draws where a model of 'attn train vit' looks: the image (enlarged), then for\n"
        "each layer the [CLS] token's attention over the patches (mean over the heads),\n"
        "then the attention rollout through all layers (Abnar & Zuidema 2020: each\n"
        "layer's head-averaged attention plus the identity, rows renormalised,\n"
        "multiplied through the layers; the [CLS] row).  Each map is scaled to its own\n"
        "range (dark: least, yellow: most); the note under it gives the largest weight.",
        opts, NULL,
        "attn attention-map --model vit-model --index 0 -o boot.png\n"
        "attn attention-map --model vit-model --index 5 --train -o a.png\n"
        "attn attention-map --model vit-model shoe.pgm"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if ((r = vit_src_check(&spec, &src, npos, 1, "an image file")) != 0) return r;
    attn_ctx *ctx;
    vit_model v;
    vit_input in;
    memset(&in, 0, sizeof in);
    if (!vit_src_open(cmd, &src, &ctx, &v)) return 1;
    const char *data = src.data;
    long long index = src.index;
    int train = src.train;
    int rc = 1;
    const attn_vit_config *c = &v.vm.cfg;
    int64_t R = c->image_size, G = R / c->patch, N = G * G, L = N + 1, H = c->tf.nhead,
            NL = c->tf.num_encoder_layers, K = c->num_classes;
    float *cls = malloc((size_t)(NL * H * L) * sizeof(float)),
          *W = malloc((size_t)(NL * L * L) * sizeof(float)),
          *maps = malloc((size_t)((NL + 1) * N) * sizeof(float)),
          *img = malloc((size_t)(R * R) * sizeof(float)),
          *logits = malloc((size_t)K * sizeof(float));
    double *p = malloc((size_t)K * sizeof(double));
    attn_cli_panel *pn = calloc((size_t)(NL + 2), sizeof *pn);
    char(*labels)[32] = calloc((size_t)(NL + 2), sizeof *labels);
    char(*notes)[32] = calloc((size_t)(NL + 2), sizeof *notes);
    attn_status st;
    if (!cls || !W || !maps || !img || !logits || !p || !pn || !labels || !notes) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        goto out;
    }
    if (!(index >= 0 ? input_index(cmd, data, train, index, &v, &in)
                     : input_file(cmd, argv[1], &v, &in)))
        goto out;
    if ((st = predict(ctx, &v, &in, logits, p)) != ATTN_OK) goto fail;
    {
        attn_tensor X = attn_view4(in.x, 1, 1, R, R), A = attn_view4(cls, NL, 1, H, L);
        if ((st = attn_vit_attention(ctx, v.m, &X, NULL, &A)) != ATTN_OK) goto fail;
    }
    if ((st = full_attention(ctx, &v, in.x, W)) != ATTN_OK) goto fail;
    /* the [CLS] rows two ways: through the layers' modules and attn_vit_attention */
    double worst = 0;
    for (int64_t l = 0; l < NL; l++)
        for (int64_t j = 0; j < L; j++) {
            double mean = 0;
            for (int64_t h = 0; h < H; h++) mean += cls[(l * H + h) * L + j];
            mean /= (double)H;
            double d = fabs(mean - (double)W[l * L * L + j]);
            worst = d > worst ? d : worst;
            if (j > 0) maps[l * N + j - 1] = (float)mean;
        }
    if (!(worst <= 1e-4)) {
        fprintf(stderr, "attn %s: internal error: the [CLS] attention through the layers' "
                        "modules differs from attn_vit_attention's by %g\n", cmd, worst);
        goto out;
    }
    if (!rollout(W, NL, L, maps + NL * N)) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        goto out;
    }
    for (int64_t i = 0; i < R * R; i++) img[i] = in.pixels[i];
    char lb[32], pb[32], title[256], where[96];
    if (in.file) snprintf(where, sizeof where, "%s", in.file);
    else snprintf(where, sizeof where, "%s image %lld", train ? "training" : "test",
                  (long long)in.index);
    int64_t best = argmax_d(p, K);
    snprintf(title, sizeof title, "%s%s%s: predicted %s (%.1f%%); [CLS] attention, mean of %lld "
                                  "heads",
             where, in.label >= 0 ? ", label " : "",
             in.label >= 0 ? class_name(in.label, K, lb, sizeof lb) : "",
             class_name(best, K, pb, sizeof pb), 100 * p[best], (long long)H);
    pn[0] = (attn_cli_panel){img, (int)R, (int)R, 1, 0, 255, "image", NULL};
    snprintf(notes[0], sizeof notes[0], "%lldx%lld, %lldx%lld patches", (long long)R,
             (long long)R, (long long)G, (long long)G);
    pn[0].note = notes[0];
    for (int64_t l = 0; l <= NL; l++) {
        const float *mp = maps + l * N;
        float mx = mp[0];
        for (int64_t j = 1; j < N; j++) mx = mp[j] > mx ? mp[j] : mx;
        if (l < NL) snprintf(labels[l + 1], sizeof labels[l + 1], "layer %lld", (long long)l + 1);
        else snprintf(labels[l + 1], sizeof labels[l + 1], "rollout");
        snprintf(notes[l + 1], sizeof notes[l + 1], "max %.3f", (double)mx);
        pn[l + 1] = (attn_cli_panel){mp, (int)G, (int)G, 0, 0, 0, labels[l + 1], notes[l + 1]};
    }
    if ((st = attn_cli_panels_png(ctx, out, pn, (int)(NL + 2), 168, title)) != ATTN_OK) goto fail;
    printf("%s: predicted %s (%.1f%%)%s%s\nattention map: %s\n", where,
           class_name(best, K, pb, sizeof pb), 100 * p[best], in.label >= 0 ? ", label " : "",
           in.label >= 0 ? class_name(in.label, K, lb, sizeof lb) : "", out);
    rc = 0;
    goto out;
fail:
    rc = attn_cli_fail(ctx, cmd, st);
out:
    free(cls), free(W), free(maps), free(img), free(logits), free(p), free(pn), free(labels),
        free(notes);
    input_free(&in);
    vit_model_free(&v);
    attn_ctx_free(ctx);
    return rc;
}
