/* attn train vit / classify / attention-map: a Vision Transformer (attn_vit_* in attn.h) on
 * Fashion-MNIST (or any IDX set of square grayscale images with labels 0..9).
 *
 * The training, its data (attn_images_*), checkpoints, model files and evaluation are the
 * library's vit task (attn_vit_train, attn_tasks.h; src/train/vit_task.c, src/io/images.c);
 * here are the options, the progress lines, the loss curve (loss.svg), the summary, and the
 * two commands that read its models.  Under mpirun (-DATTN_MPI=ON) `train vit` is data
 * parallel like the other tasks (common/train_dp.c).
 *
 * Output folder: model.safetensors (the parameters under their state_dict names, the config in
 * the metadata: task "vit"), state.safetensors (the same under "model.", AdamW under "optim.",
 * the run's settings and log), log.csv (one line per epoch) and loss.svg. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "pictures/pictures.h"

#define VIT_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

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
    if (K == 10 && attn_fashion_class(k)) return attn_fashion_class(k);
    snprintf(buf, cap, "class %lld", (long long)k);
    return buf;
}

/* ---- shared by classify and attention-map ------------------------------------------------ */
/* A trained model: the module, its config and the checkpoint it came from. */
typedef struct vit_model {
    attn_module *m;
    attn_vit_model_info vm;
    attn_st *st;
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
    if (attn_vit_model_read(ctx, v->st, v->path, &v->vm) != ATTN_OK) {
        fprintf(stderr, "attn %s: ", cmd);
        attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx)); /* it may quote the file's metadata */
        fputc('\n', stderr);
        vit_model_free(v);
        return 0;
    }
    if ((st = attn_vit_model_load(ctx, v->st, v->path, &v->vm, &v->m)) != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        vit_model_free(v);
        return 0;
    }
    return 1;
}

/* One image to classify or draw: normalised pixels [R*C] and where it came from. */
typedef struct vit_input {
    float *x;        /* [R, C] normalised */
    attn_images img; /* the image's set: its pixels [R, C] */
    int64_t index;   /* --index, or -1 for a file */
    int label;       /* -1 when unknown */
    const char *file;
} vit_input;

static void input_free(vit_input *in) {
    free(in->x);
    attn_images_free(&in->img);
    memset(in, 0, sizeof *in);
}

/* Image `index` of the test (train = 0) or training set in dir; prints the problem and returns
 * 0 on failure. */
static int input_index(const char *cmd, attn_ctx *ctx, const char *dir, int train,
                       int64_t index, const vit_model *v, vit_input *in) {
    attn_images s;
    memset(in, 0, sizeof *in);
    if (attn_images_mnist_load(ctx, dir, train, index + 1, &s) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", cmd, attn_ctx_errmsg(ctx));
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
             !(in->img.pixels = malloc((size_t)(R * R))))
        fprintf(stderr, "attn %s: out of memory\n", cmd);
    else if (attn_images_batch(ctx, &s, &index, 1, NULL, 0, 0, v->vm.pixel_mean,
                               v->vm.pixel_std, in->x, NULL) != ATTN_OK)
        attn_cli_fail(ctx, cmd, attn_ctx_status(ctx));
    else {
        memcpy(in->img.pixels, s.pixels + index * R * R, (size_t)(R * R));
        in->img.n = 1, in->img.rows = in->img.cols = R;
        in->index = index;
        in->label = s.labels ? s.labels[index] : -1;
        ok = 1;
    }
    if (!ok) input_free(in);
    attn_images_free(&s);
    return ok;
}

/* A PGM or PNG file, which must be the model's size. */
static int input_file(const char *cmd, attn_ctx *ctx, const char *path, const vit_model *v,
                      vit_input *in) {
    int64_t R = v->vm.cfg.image_size;
    memset(in, 0, sizeof *in);
    if (attn_images_read_gray(ctx, path, &in->img) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", cmd, attn_ctx_errmsg(ctx));
        return 0;
    }
    if (in->img.rows != R || in->img.cols != R) {
        fprintf(stderr, "attn %s: %s is %lldx%lld pixels; the model takes %lldx%lld images\n",
                cmd, path, (long long)in->img.cols, (long long)in->img.rows, (long long)R,
                (long long)R);
        input_free(in);
        return 0;
    }
    if (!(in->x = malloc((size_t)(R * R) * sizeof(float)))) {
        fprintf(stderr, "attn %s: out of memory\n", cmd);
        input_free(in);
        return 0;
    }
    int64_t zero = 0;
    if (attn_images_batch(ctx, &in->img, &zero, 1, NULL, 0, 0, v->vm.pixel_mean, v->vm.pixel_std,
                          in->x, NULL) != ATTN_OK) {
        attn_cli_fail(ctx, cmd, attn_ctx_status(ctx));
        input_free(in);
        return 0;
    }
    in->index = -1;
    in->label = -1;
    in->file = path;
    return 1;
}

/* Class probabilities of one image: softmax of the logits into p [K]. */
static attn_status predict(attn_ctx *ctx, const vit_model *v, const vit_input *in, float *logits,
                           double *p) {
    return attn_vit_classify(ctx, v->m, &v->vm.cfg, in->x, logits, p);
}

static int64_t argmax_d(const double *p, int64_t n) {
    int64_t b = 0;
    for (int64_t k = 1; k < n; k++)
        if (p[k] > p[b]) b = k;
    return b;
}

/* ---- attn train vit: the options, the library's task (attn_vit_train), the printing ------ */
typedef struct train_opts {
    const char *data, *out, *save_init;
    long long patch, layers, dim, heads, ffn, epochs, batch, warmup, seed, limit, test_limit,
        threads, stop_after, pad, eval_batch;
    double lr, wd, dropout, clip, smoothing;
    int dtype, resume, quiet, json, no_augment;
} train_opts;

/* What the callbacks print with. */
typedef struct train_ui {
    const train_opts *o;
    const attn_cli_paths *paths;
    const char *log; /* the JSON-lines log the chart is drawn from (NULL: none) */
    int64_t R, te_n;
    int tty, writer;
    double last_print;
} train_ui;

static attn_status on_start(void *user, attn_ctx *ctx, const attn_vit_train_report *r) {
    const train_ui *u = user;
    const train_opts *o = u->o;
    const int64_t R = u->R;
    if (o->quiet) return ATTN_OK;
    fprintf(stderr, "training vit: %lldx%lld images, patch %lld (%lld patches), dim %lld, "
                    "%lld heads, %lld layers, ffn %lld, %lld parameters\n",
            (long long)R, (long long)R, o->patch, (R / o->patch) * (R / o->patch), o->dim,
            o->heads, o->layers, o->ffn, (long long)r->parameters);
    fprintf(stderr, "data: %lld training images, %lld test images; batch %lld, %lld steps "
                    "per epoch, %lld epochs; %s, %d threads\n",
            (long long)r->train_images, (long long)r->test_images, (long long)r->batch,
            (long long)r->steps_per_epoch, o->epochs, attn_cli_dtype_name(o->dtype),
            attn_ctx_threads(ctx));
    if (r->epochs_done)
        fprintf(stderr, "resuming after epoch %lld of %lld\n", (long long)r->epochs_done,
                o->epochs);
    return ATTN_OK;
}

/* After every step: the progress line (at most one a second). */
static int on_step(void *user, const attn_train_progress *p, const attn_vit_train_report *r) {
    train_ui *u = user;
    const train_opts *o = u->o;
    attn_cli_dp_fault(p->step);
    const int64_t spe = r->steps_per_epoch, g = p->step - 1, e = g / spe, s = g % spe;
    double now = r->now_s;
    if (!o->quiet && (now - u->last_print >= 1.0 || s == spe - 1) && !p->evaluated) {
        u->last_print = now;
        int64_t seen;
        double mean = attn_vit_train_epoch_loss(r, e, g, &seen), tt = r->train_s;
        double ips = tt > 0 ? (double)r->images_seen / tt : 0;
        /* the rest: training at this speed, and the test passes at theirs (until the first,
         * guessed at three times the training speed) */
        double eval_ips = r->evals ? (double)(r->evals * u->te_n) / r->eval_s : 3 * ips;
        double rest = ips > 0 ? (double)((r->last_epoch - e) * r->train_images - seen) / ips +
                                    (double)((r->last_epoch - e) * u->te_n) / eval_ips
                              : 0;
        char el[16], eta[16];
        attn_cli_fmt_time(r->run_elapsed_s, el, sizeof el);
        attn_cli_fmt_time(rest, eta, sizeof eta);
        fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.2e  %5.0f "
                        "img/s  %s elapsed  ETA %s%s",
                u->tty ? "\r\033[K" : "", (long long)e + 1, o->epochs, (long long)s + 1,
                (long long)spe, mean, (double)p->lr, ips, el, eta, u->tty ? "" : "\n");
        fflush(stderr);
    }
    return attn_cli_stop_requested();
}

/* After an epoch (its model and log.csv are written): its line, the loss curve. */
static attn_status on_epoch(void *user, attn_ctx *ctx, const attn_vit_train_report *r) {
    const train_ui *u = user;
    const int64_t e = r->epochs_done - 1;
    const float *row = r->epoch_log + e * ATTN_VIT_LOG_COLS;
    if (!u->o->quiet) {
        char el[16];
        attn_cli_fmt_time(r->elapsed_s, el, sizeof el);
        fprintf(stderr, "%sepoch %lld/%lld  train loss %.4f  test loss %.4f  test accuracy "
                        "%.2f%%  (%.0f img/s training, %.0f img/s test)  %s elapsed\n",
                u->tty ? "\r\033[K" : "", (long long)e + 1, u->o->epochs,
                (double)row[ATTN_VIT_LOG_TRAIN_LOSS], r->test_loss, 100 * r->test_accuracy,
                (double)row[ATTN_VIT_LOG_TRAIN_IPS], (double)row[ATTN_VIT_LOG_EVAL_IPS], el);
        fflush(stderr);
    }
    (void)ctx;
    /* the chart so far (the log has the steps up to this epoch's last); one that cannot be
     * drawn now is said (attn_cli_train_chart prints why) and training goes on: the chart
     * drawn at the end decides the exit status (stopping here would report this context's
     * message, which is not the chart's) */
    if (u->writer) (void)attn_cli_train_chart("train vit", u->log, u->paths->svg);
    return ATTN_OK;
}

/* The settings every rank of a data-parallel run must share (common/train_dp.c). */
static int dp_notes(const char *cmd, const train_opts *o, const attn_images *tr,
                    const attn_images *te, const char *state) {
    attn_cli_dp_note_data("the training images (--data, --limit)", tr->pixels,
                          (size_t)(tr->n * tr->rows * tr->cols));
    attn_cli_dp_note_data("the training labels (--data, --limit)", tr->labels, (size_t)tr->n);
    attn_cli_dp_note_data("the test images (--data, --test-limit)", te->pixels,
                          (size_t)(te->n * te->rows * te->cols));
    attn_cli_dp_note_data("the test labels (--data, --test-limit)", te->labels, (size_t)te->n);
    attn_cli_dp_note("--patch", "%lld", o->patch);
    attn_cli_dp_note("--layers", "%lld", o->layers);
    attn_cli_dp_note("--dim", "%lld", o->dim);
    attn_cli_dp_note("--heads", "%lld", o->heads);
    attn_cli_dp_note("--ffn", "%lld", o->ffn);
    attn_cli_dp_note("--epochs", "%lld", o->epochs);
    attn_cli_dp_note("--lr", "%.17g", o->lr);
    attn_cli_dp_note("--warmup", "%lld", o->warmup);
    attn_cli_dp_note("--weight-decay", "%.17g", o->wd);
    attn_cli_dp_note("--dropout", "%.17g", o->dropout);
    attn_cli_dp_note("--clip", "%.17g", o->clip);
    attn_cli_dp_note("--label-smoothing", "%.17g", o->smoothing);
    attn_cli_dp_note("--no-augment", "%d", o->no_augment);
    attn_cli_dp_note("--pad", "%lld", o->pad);
    attn_cli_dp_note("--seed", "%lld", o->seed);
    attn_cli_dp_note("--stop-after", "%lld", o->stop_after);
    attn_cli_dp_note("--dtype", "%s", attn_cli_dtype_name(o->dtype));
    if (o->resume) return attn_cli_dp_note_file(cmd, "--resume", state);
    attn_cli_dp_note("--resume", "(none)");
    return 1;
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
    const int rank0 = attn_cli_dp_rank() == 0;
    if (!rank0) o.quiet = 1; /* rank 0 alone prints progress */

    /* the data first: nothing is written before it is read */
    attn_images tr, te;
    memset(&tr, 0, sizeof tr), memset(&te, 0, sizeof te);
    int rc = 1;
    attn_ctx *ctx = NULL;
    attn_st *rs = NULL;
    attn_vit_train_report rep;
    memset(&rep, 0, sizeof rep);
    attn_status st = ATTN_OK;
    const int dtype_asked = o.dtype;
    if (attn_cli_ctx_dtype(cmd, o.threads, o.quiet, &o.dtype, &ctx)) return 1;
    attn_vit_train_config cfg = attn_vit_train_defaults();
    cfg.patch = o.patch, cfg.num_layers = o.layers, cfg.d_model = o.dim, cfg.nhead = o.heads;
    cfg.dim_feedforward = o.ffn, cfg.dropout = (float)o.dropout;
    cfg.epochs = o.epochs, cfg.batch = o.batch, cfg.warmup = o.warmup, cfg.lr = (float)o.lr;
    cfg.weight_decay = (float)o.wd, cfg.clip = (float)o.clip;
    cfg.label_smoothing = (float)o.smoothing, cfg.seed = (uint64_t)o.seed;
    cfg.augment = !o.no_augment, cfg.pad = (int)o.pad, cfg.eval_batch = o.eval_batch;
    cfg.stop_after = o.stop_after, cfg.data_name = o.data;
    if (attn_images_mnist_load(ctx, o.data, 1, o.limit, &tr) != ATTN_OK ||
        attn_images_mnist_load(ctx, o.data, 0, o.test_limit, &te) != ATTN_OK ||
        attn_vit_train_check(ctx, &tr, &te, &cfg) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", cmd, attn_ctx_errmsg(ctx));
        goto out;
    }
    attn_cli_paths paths;
    char csv[4200];
    if (attn_cli_train_dir(cmd, o.out, &paths)) goto out;
    snprintf(csv, sizeof csv, "%s/log.csv", o.out);
    if (attn_cli_dp_open(cmd, ctx, o.batch, "batch", &cfg.dp)) goto out;
    if (o.resume) {
        struct stat sb;
        if (stat(paths.state, &sb) != 0) {
            fprintf(stderr, "attn %s: --resume: %s: %s (no earlier run to continue)\n", cmd,
                    paths.state, strerror(errno));
            goto out;
        }
        if ((st = attn_st_read_file(ctx, paths.state, &rs)) != ATTN_OK) goto fail;
        cfg.resume_name = paths.state;
        if (attn_vit_train_resume_check(ctx, &tr, &cfg, rs) != ATTN_OK) {
            fprintf(stderr, "attn %s: ", cmd);
            attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx)); /* it may quote the metadata */
            fputc('\n', stderr);
            goto out;
        }
        attn_cli_dtype_resume(ctx, rs, dtype_asked, &o.dtype);
    }
    if (!dp_notes(cmd, &o, &tr, &te, paths.state) || attn_cli_dp_ready(cmd, 1)) goto out;
    train_ui ui = {&o, &paths, attn_cli_train_log(&tc, &paths), tr.rows, te.n,
                   !o.quiet && isatty(2), rank0, -1};
    cfg.dtype = attn_cli_dtype_name(o.dtype);
    cfg.accum = (int)tc.accum, cfg.save_every = tc.save_every;
    cfg.state_path = paths.state, cfg.model_path = paths.model, cfg.csv_path = csv;
    cfg.log_path = ui.log, cfg.resume_name = paths.state;
    cfg.tb_dir = rank0 ? attn_cli_train_tb(&tc) : NULL;
    cfg.save_init = o.save_init;
    cfg.user = &ui, cfg.on_start = on_start, cfg.on_step = on_step, cfg.on_epoch = on_epoch;
    attn_cli_stop_on_signals();
    st = attn_vit_train(ctx, &tr, &te, &cfg, rs, &rep, NULL);
    attn_st_free(rs);
    rs = NULL;
    if (st != ATTN_OK) {
        if (st == ATTN_E_NONFINITE && !o.quiet && ui.tty) fputc('\n', stderr);
        if (st == ATTN_E_NONFINITE) {
            fprintf(stderr, "attn %s: %s\n", cmd, attn_ctx_errmsg(ctx));
            goto out;
        }
        goto fail;
    }
    if (!rank0) { /* rank 0 writes the files and prints */
        rc = 0;
        goto out;
    }
    const int chart = attn_cli_train_chart("train vit", cfg.log_path, paths.svg);
    if (chart > 0) goto out;
    const char *plot = chart == 0 ? paths.svg : "(none: no log)";

    /* the summary */
    int64_t E = rep.epochs_done;
    const float *last = E ? rep.epoch_log + (E - 1) * ATTN_VIT_LOG_COLS : NULL;
    double tr_ips = rep.train_s > 0 ? (double)rep.images_seen / rep.train_s : 0,
           ev_ips = rep.eval_s > 0 ? (double)(rep.evals * te.n) / rep.eval_s : 0;
    if (o.json) {
        printf("{\"epochs_done\": %lld, \"epochs\": %lld, \"threads\": %d, \"dtype\": \"%s\", "
               "\"parameters\": %lld, \"train_images\": %lld, \"test_images\": %lld, "
               "\"elapsed_s\": %.1f, \"train_images_per_s\": %.1f, \"eval_images_per_s\": %.1f, "
               "\"test_accuracy\": %.6f, \"log\": [",
               (long long)E, o.epochs, attn_ctx_threads(ctx), attn_cli_dtype_name(o.dtype),
               (long long)rep.parameters, (long long)tr.n, (long long)te.n, rep.elapsed_s,
               tr_ips, ev_ips, last ? (double)last[ATTN_VIT_LOG_TEST_ACC] : 0.0);
        for (int64_t e = 0; e < E; e++) {
            printf("%s{\"epoch\": %lld", e ? ", " : "", (long long)e + 1);
            for (int c = 0; c < ATTN_VIT_LOG_COLS; c++)
                printf(", \"%s\": %.6g", attn_vit_log_name(c),
                       (double)rep.epoch_log[e * ATTN_VIT_LOG_COLS + c]);
            printf("}");
        }
        printf("], \"model\": ");
        json_str(stdout, paths.model);
        printf(", \"state\": ");
        json_str(stdout, paths.state);
        printf(", \"log_csv\": ");
        json_str(stdout, csv);
        printf(", \"plot\": ");
        if (chart == 0) json_str(stdout, paths.svg);
        else printf("null");
        printf("}\n");
    } else {
        if (last) {
            char el[16];
            attn_cli_fmt_time(rep.elapsed_s, el, sizeof el);
            printf("test accuracy: %.2f%% after epoch %lld of %lld (test loss %.4f)\n",
                   100 * (double)last[ATTN_VIT_LOG_TEST_ACC], (long long)E, o.epochs,
                   (double)last[ATTN_VIT_LOG_TEST_LOSS]);
            printf("time: %s (%.0f images/s training, %.0f images/s test; %d thread%s, %s)\n", el,
                   tr_ips, ev_ips, attn_ctx_threads(ctx), attn_ctx_threads(ctx) == 1 ? "" : "s",
                   attn_cli_dtype_name(o.dtype));
        }
        if (rep.end == ATTN_TRAIN_STOPPED)
            printf("stopped by a signal at step %lld (epoch %lld): continue with --resume -o "
                   "%s\n", (long long)rep.end_step,
                   (long long)(rep.end_step / rep.steps_per_epoch) + 1, o.out);
        else if (E < o.epochs)
            printf("stopped after epoch %lld of %lld: continue with --resume -o %s\n",
                   (long long)E, o.epochs, o.out);
        printf("model: %s\nstate: %s\nlog: %s\nplot: %s\n", paths.model, paths.state, csv,
               plot);
    }
    rc = 0;
    goto out;
fail:
    if (!o.quiet && isatty(2)) fputc('\n', stderr);
    rc = attn_cli_dp_fail(ctx, cmd, st);
out:
    attn_vit_train_report_free(&rep);
    attn_st_free(rs);
    attn_ctx_free(ctx);
    attn_images_free(&tr);
    attn_images_free(&te);
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
    if (!s->model) return attn_cli_usage_error(spec, "--model DIR is required");
    if (s->test && s->train)
        return attn_cli_usage_error(spec, "--test and --train exclude each other");
    if (npos > max_files) return attn_cli_usage_error(spec, "one image at a time");
    if ((s->index >= 0) == (npos > 0))
        return attn_cli_usage_error(spec, "give either --index N or %s", files);
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
        int ok = index >= 0 ? input_index(cmd, ctx, data, train, index, &v, &in)
                            : input_file(cmd, ctx, argv[1 + i], &v, &in);
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
    if (!(index >= 0 ? input_index(cmd, ctx, data, train, index, &v, &in)
                     : input_file(cmd, ctx, argv[1], &v, &in)))
        goto out;
    if ((st = predict(ctx, &v, &in, logits, p)) != ATTN_OK) goto fail;
    {
        attn_tensor X = attn_view4(in.x, 1, 1, R, R), A = attn_view4(cls, NL, 1, H, L);
        if ((st = attn_vit_attention(ctx, v.m, &X, NULL, &A)) != ATTN_OK) goto fail;
    }
    if ((st = attn_vit_attention_layers(ctx, v.st, &v.vm, in.x, W)) != ATTN_OK) goto fail;
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
    if ((st = attn_vit_attention_rollout(ctx, W, NL, L, maps + NL * N)) != ATTN_OK) goto fail;
    for (int64_t i = 0; i < R * R; i++) img[i] = in.img.pixels[i];
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
