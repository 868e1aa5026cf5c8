/* The vit task of the library (attn_vit_train, src/train/vit_task.c) on a tiny set of images
 * made here in memory:
 *   - the first step's loss against an independent computation (the initial model through
 *     attn_vit_forward on the epoch's first images, the cross-entropy in double here), 1e-5;
 *   - the same run on 1 and 3 threads: the same losses and weights, bit for bit;
 *   - a run stopped inside an epoch by its step callback and resumed from its checkpoint: the
 *     same losses and weights as the uninterrupted run, bit for bit; a setting that differs is
 *     refused naming its option;
 *   - --accum 2 against one share, without dropout and with it: every loss within 1e-5
 *     relative;
 *   - the test pass of the report against attn_vit_classify image by image (loss in double,
 *     1e-5; accuracy exactly) and attn_vit_evaluate; the model file holds the run's weights;
 *   - the attention maps through the layers' modules against attn_vit_attention's [CLS] rows
 *     (1e-5), the rollout of one layer against (W + I) / 2;
 *   - refusals: labels over num_classes, a patch that does not divide, NULL arguments, a
 *     checkpoint of another task. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_tasks.h"
#include "testutil.h"

enum { SIDE = 8, NTR = 48, NTE = 20, K = 4 };

/* Image i of class i % K: a bright bar whose place depends on the class, over noise. */
static void make_set(attn_images *s, int n, uint64_t seed) {
    s->n = n, s->rows = s->cols = SIDE, s->num_classes = K;
    s->pixels = malloc((size_t)n * SIDE * SIDE);
    s->labels = malloc((size_t)n);
    uint64_t r = seed;
    for (int i = 0; i < n; i++) {
        int k = i % K;
        uint8_t *px = s->pixels + (size_t)i * SIDE * SIDE;
        for (int j = 0; j < SIDE * SIDE; j++) px[j] = (uint8_t)(tu_rand(&r) & 63);
        for (int a = 1; a < SIDE - 1; a++) px[(k < 2 ? a * SIDE + 2 + 3 * k : (2 + 3 * (k - 2)) * SIDE + a)] = 240;
        s->labels[i] = (uint8_t)k;
    }
}

static attn_vit_train_config tiny(void) {
    attn_vit_train_config c = attn_vit_train_defaults();
    c.patch = 4, c.d_model = 16, c.nhead = 2, c.num_layers = 2, c.dim_feedforward = 32;
    c.num_classes = K, c.dropout = 0.1f, c.epochs = 3, c.batch = 20, c.warmup = 2;
    c.lr = 3e-3f, c.eval_batch = 7, c.seed = 5;
    return c;
}

/* The module's parameters, concatenated (caller frees). */
static float *weights(const attn_module *m, int64_t *n) {
    *n = attn_module_numel(m);
    float *w = malloc((size_t)*n * sizeof(float)), *p = w;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor v;
        attn_module_param_at(m, i, &name, &v);
        int64_t c = 1;
        for (int d = 0; d < v.ndim; d++) c *= v.shape[d];
        memcpy(p, v.data, (size_t)c * sizeof(float));
        p += c;
    }
    return w;
}

typedef struct run_out {
    float *loss, *w;
    int64_t steps, nw;
    attn_vit_train_report r;
} run_out;

static int stop_step; /* on_step asks to stop after this step (0: never) */
static int on_step(void *user, const attn_train_progress *p, const attn_vit_train_report *r) {
    (void)user, (void)r;
    return stop_step && p->step == stop_step;
}

static attn_status train(int threads, const attn_vit_train_config *c, const attn_images *tr,
                         const attn_images *te, const attn_st *resume, run_out *o) {
    attn_ctx *ctx = tu_ctx(threads);
    attn_module *m = NULL;
    memset(o, 0, sizeof *o);
    attn_status st = attn_vit_train(ctx, tr, te, c, resume, &o->r, &m);
    TU_CHECK(st == ATTN_OK, "attn_vit_train (%d threads): %s", threads, attn_ctx_errmsg(ctx));
    if (st == ATTN_OK) {
        o->steps = o->r.steps_done;
        o->loss = malloc((size_t)o->r.steps * sizeof(float));
        memcpy(o->loss, o->r.step_loss, (size_t)o->r.steps_done * sizeof(float));
        o->w = weights(m, &o->nw);
    }
    attn_module_free(m);
    attn_ctx_free(ctx);
    return st;
}

static void run_free(run_out *o) {
    free(o->loss), free(o->w);
    attn_vit_train_report_free(&o->r);
}

static int same(const run_out *a, const run_out *b) {
    return a->steps == b->steps && a->nw == b->nw &&
           !memcmp(a->loss, b->loss, (size_t)a->steps * sizeof(float)) &&
           !memcmp(a->w, b->w, (size_t)a->nw * sizeof(float));
}

/* The first step's loss, computed here: the initial model (attn_module_init with the seed),
 * the first batch of epoch 0 (augmented as the task does), eval-mode forward (no dropout),
 * cross-entropy in double. */
static double first_loss(const attn_vit_train_config *c, const attn_images *tr) {
    attn_ctx *ctx = tu_ctx(1);
    attn_vit_config vc = attn_vit_train_model_config(c, SIDE);
    attn_module *m = NULL;
    int64_t perm[NTR], y[NTR];
    float x[NTR * SIDE * SIDE], lg[NTR * K];
    double loss = NAN;
    attn_images_aug aug = {c->pad, 1};
    attn_images_shuffle(c->seed, 0, tr->n, perm);
    if (attn_vit_create(ctx, &vc, &m) == ATTN_OK && attn_module_init(ctx, m, c->seed) == ATTN_OK &&
        attn_images_batch(ctx, tr, perm, c->batch, &aug, c->seed, 0, c->pixel_mean, c->pixel_std,
                          x, y) == ATTN_OK) {
        attn_tensor X = attn_view4(x, c->batch, 1, SIDE, SIDE), L = attn_view2(lg, c->batch, K);
        if (attn_vit_forward(ctx, m, &X, NULL, &L) == ATTN_OK) {
            loss = 0;
            for (int64_t i = 0; i < c->batch; i++) {
                double mx = lg[i * K], s = 0;
                for (int k = 1; k < K; k++) mx = lg[i * K + k] > mx ? lg[i * K + k] : mx;
                for (int k = 0; k < K; k++) s += exp((double)lg[i * K + k] - mx);
                loss += mx + log(s) - lg[i * K + y[i]];
            }
            loss /= (double)c->batch;
        }
    }
    attn_module_free(m);
    attn_ctx_free(ctx);
    return loss;
}

int main(void) {
    attn_images tr, te;
    make_set(&tr, NTR, 11);
    make_set(&te, NTE, 12);
    char dir[] = "/tmp/attn-vit-train-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char state[256], model[256], csv[256];
    snprintf(state, sizeof state, "%s/state.safetensors", dir);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(csv, sizeof csv, "%s/log.csv", dir);

    /* the first loss, independently (no dropout in this run) */
    attn_vit_train_config c = tiny();
    c.dropout = 0, c.epochs = 1;
    run_out a, b, s;
    if (train(1, &c, &tr, &te, NULL, &a) == ATTN_OK) {
        double ref = first_loss(&c, &tr), d = fabs((double)a.loss[0] - ref);
        TU_CHECK(d <= 1e-5 * fabs(ref), "first loss %.9g, computed here %.9g", (double)a.loss[0],
                 ref);
        printf("  first step's loss %.7f, computed here %.7f\n", (double)a.loss[0], ref);
    }
    run_free(&a);

    /* 1 and 3 threads: the same bits (dropout and augmentation on) */
    c = tiny();
    c.state_path = state, c.model_path = model, c.csv_path = csv;
    train(1, &c, &tr, &te, NULL, &a);
    train(3, &c, &tr, &te, NULL, &b);
    TU_CHECK(a.steps == 9 && a.r.epochs_done == 3 && a.r.steps_per_epoch == 3,
             "%lld steps, %lld epochs", (long long)a.steps, (long long)a.r.epochs_done);
    TU_CHECK(same(&a, &b), "1 and 3 threads differ");
    for (int64_t i = 0; i < a.steps; i++)
        TU_CHECK(isfinite(a.loss[i]) && a.loss[i] > 0, "loss %lld = %g", (long long)i,
                 (double)a.loss[i]);

    /* the report's test pass against attn_vit_classify, one image at a time */
    {
        attn_ctx *ctx = tu_ctx(1);
        attn_st *st = NULL;
        attn_module *m = NULL;
        attn_vit_model_info info;
        TU_STATUS(attn_st_read_file(ctx, model, &st), ATTN_OK, ctx);
        TU_STATUS(attn_vit_model_load(ctx, st, model, &info, &m), ATTN_OK, ctx);
        if (m) {
            int64_t nw;
            float *w = weights(m, &nw);
            TU_CHECK(nw == a.nw && !memcmp(w, a.w, (size_t)nw * sizeof(float)),
                     "the model file's weights are not the run's");
            free(w);
            double loss = 0;
            int right = 0;
            for (int i = 0; i < NTE; i++) {
                float x[SIDE * SIDE], lg[K];
                double p[K];
                int64_t ix = i;
                attn_images_batch(ctx, &te, &ix, 1, NULL, 0, 0, info.pixel_mean, info.pixel_std,
                                  x, NULL);
                TU_STATUS(attn_vit_classify(ctx, m, &info.cfg, x, lg, p), ATTN_OK, ctx);
                loss -= log(p[te.labels[i]]);
                int best = 0;
                for (int k = 1; k < K; k++)
                    if (lg[k] > lg[best]) best = k;
                right += best == te.labels[i];
            }
            loss /= NTE;
            const float *row = a.r.epoch_log + 2 * ATTN_VIT_LOG_COLS;
            TU_CHECK(fabs(loss - row[ATTN_VIT_LOG_TEST_LOSS]) <= 1e-5 * loss,
                     "test loss %.9g, image by image %.9g", (double)row[ATTN_VIT_LOG_TEST_LOSS],
                     loss);
            TU_CHECK(row[ATTN_VIT_LOG_TEST_ACC] == (float)right / NTE, "accuracy %g, %d of %d",
                     (double)row[ATTN_VIT_LOG_TEST_ACC], right, NTE);
            /* the attention maps: every layer's [CLS] row through the layers' modules against
             * attn_vit_attention's (head mean), 1e-5; the rollout of one layer by hand */
            {
                enum { L = (SIDE / 4) * (SIDE / 4) + 1, NL = 2, H = 2 };
                float x[SIDE * SIDE], W[NL * L * L], cls[NL * H * L], roll[L - 1];
                int64_t ix = 3;
                attn_images_batch(ctx, &te, &ix, 1, NULL, 0, 0, info.pixel_mean, info.pixel_std,
                                  x, NULL);
                TU_STATUS(attn_vit_attention_layers(ctx, st, &info, x, W), ATTN_OK, ctx);
                attn_tensor X = attn_view4(x, 1, 1, SIDE, SIDE), A = attn_view4(cls, NL, 1, H, L);
                TU_STATUS(attn_vit_attention(ctx, m, &X, NULL, &A), ATTN_OK, ctx);
                double worst = 0;
                for (int l = 0; l < NL; l++)
                    for (int j = 0; j < L; j++) {
                        double mean = (cls[(l * H + 0) * L + j] + cls[(l * H + 1) * L + j]) / 2.0;
                        double d = fabs(mean - W[l * L * L + j]);
                        worst = d > worst || isnan(d) ? d : worst;
                    }
                TU_CHECK(worst <= 1e-5, "[CLS] attention: the layers' modules against "
                         "attn_vit_attention differ by %g", worst);
                TU_STATUS(attn_vit_attention_rollout(ctx, W, 1, L, roll), ATTN_OK, ctx);
                double rw = 0;
                for (int j = 1; j < L; j++) { /* one layer: (W + I) / 2, row 0 */
                    double d = fabs(roll[j - 1] - W[j] / 2.0);
                    rw = d > rw || isnan(d) ? d : rw;
                }
                TU_CHECK(rw <= 1e-6, "rollout of one layer: off by %g", rw);
                TU_STATUS(attn_vit_attention_rollout(ctx, W, 0, L, roll), ATTN_E_INVALID, ctx);
            }
            double l2, acc2;
            TU_STATUS(attn_vit_evaluate(ctx, m, &info.cfg, &te, info.pixel_mean, info.pixel_std,
                                        64, &l2, &acc2), ATTN_OK, ctx);
            TU_CHECK(fabs(l2 - loss) <= 1e-5 * loss && acc2 == (double)right / NTE,
                     "attn_vit_evaluate %.9g %g", l2, acc2);
        }
        attn_module_free(m);
        attn_st_free(st);
        attn_ctx_free(ctx);
    }

    /* stopped inside epoch 2 (step 5 of 3 a epoch), resumed: the uninterrupted run's bits */
    stop_step = 5;
    c.on_step = on_step;
    train(2, &c, &tr, &te, NULL, &s);
    TU_CHECK(s.steps == 5 && s.r.end == ATTN_TRAIN_STOPPED && s.r.epochs_done == 1,
             "stopped at %lld (end %d)", (long long)s.steps, (int)s.r.end);
    run_free(&s);
    stop_step = 0;
    {
        attn_ctx *ctx = tu_ctx(1);
        attn_st *st = NULL;
        TU_STATUS(attn_st_read_file(ctx, state, &st), ATTN_OK, ctx);
        if (st) {
            train(1, &c, &tr, &te, st, &s);
            TU_CHECK(s.r.resumed_steps == 5 && same(&a, &s),
                     "the resumed run differs (resumed at %lld)", (long long)s.r.resumed_steps);
            run_free(&s);
            attn_vit_train_config c2 = c;
            c2.lr = 0.01f;
            attn_vit_train_report r;
            TU_STATUS(attn_vit_train(ctx, &tr, &te, &c2, st, &r, NULL), ATTN_E_INVALID, ctx);
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), "--lr differs") != NULL, "message: %s",
                     attn_ctx_errmsg(ctx));
            c2 = c, c2.d_model = 32;
            TU_STATUS(attn_vit_train(ctx, &tr, &te, &c2, st, &r, NULL), ATTN_E_INVALID, ctx);
            TU_CHECK(strstr(attn_ctx_errmsg(ctx), "holds another model") != NULL, "message: %s",
                     attn_ctx_errmsg(ctx));
            TU_STATUS(attn_vit_train_resume_check(ctx, &tr, &c2, st), ATTN_E_INVALID, ctx);
            TU_STATUS(attn_vit_train_resume_check(ctx, &tr, &c, st), ATTN_OK, ctx);
            c2 = c, c2.batch = 7; /* 7 steps an epoch: step 5 is not in epoch 2 */
            TU_STATUS(attn_vit_train_resume_check(ctx, &tr, &c2, st), ATTN_E_FORMAT, ctx);
        }
        attn_st_free(st);
        attn_ctx_free(ctx);
    }
    c.on_step = NULL;
    run_free(&a), run_free(&b);

    /* accum 2 against one share, without dropout and with it (each share draws its images'
     * masks of the whole batch): within 1e-5 */
    for (int d = 0; d < 2; d++) {
        c = tiny();
        c.dropout = d ? 0.2f : 0.0f;
        train(1, &c, &tr, &te, NULL, &a);
        c.accum = 2;
        train(1, &c, &tr, &te, NULL, &b);
        double worst = 0;
        for (int64_t i = 0; i < a.steps && i < b.steps; i++) {
            double e = fabs((double)a.loss[i] - b.loss[i]) / fabs((double)a.loss[i]);
            worst = e > worst || isnan(e) ? e : worst;
        }
        TU_CHECK(a.steps == b.steps && worst <= 1e-5, "accum 2, dropout %g: largest relative "
                 "difference %g", (double)c.dropout, worst);
        printf("  accum 2 against one share, dropout %g: largest relative loss difference %.3g\n",
               (double)c.dropout, worst);
        run_free(&a), run_free(&b);
    }

    /* refusals */
    {
        attn_ctx *ctx = tu_ctx(1);
        attn_vit_train_report r;
        c = tiny();
        TU_CHECK(attn_vit_train(NULL, &tr, &te, &c, NULL, &r, NULL) == ATTN_E_INVALID, "NULL ctx");
        TU_STATUS(attn_vit_train(ctx, NULL, &te, &c, NULL, &r, NULL), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_vit_train(ctx, &tr, &te, NULL, NULL, &r, NULL), ATTN_E_INVALID, ctx);
        c.num_classes = 3;
        TU_STATUS(attn_vit_train(ctx, &tr, &te, &c, NULL, &r, NULL), ATTN_E_INVALID, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "labels must be 0..2") != NULL, "%s",
                 attn_ctx_errmsg(ctx));
        c = tiny(), c.patch = 3;
        TU_STATUS(attn_vit_train(ctx, &tr, &te, &c, NULL, &r, NULL), ATTN_E_INVALID, ctx);
        c = tiny(), c.lr = NAN;
        TU_STATUS(attn_vit_train(ctx, &tr, &te, &c, NULL, &r, NULL), ATTN_E_INVALID, ctx);
        /* a checkpoint of another task */
        attn_st_writer *w;
        attn_st *st = NULL;
        char other[300];
        snprintf(other, sizeof other, "%s/other.safetensors", dir);
        float one = 1;
        int64_t sh[1] = {1};
        if (attn_st_writer_create(ctx, &w) == ATTN_OK) {
            attn_st_writer_meta(w, "task", "dates");
            attn_st_writer_add(w, "x", ATTN_F32, 1, sh, &one);
            TU_STATUS(attn_st_writer_save(w, other), ATTN_OK, ctx);
            attn_st_writer_free(w);
        }
        attn_vit_model_info info;
        TU_STATUS(attn_st_read_file(ctx, other, &st), ATTN_OK, ctx);
        TU_STATUS(attn_vit_model_read(ctx, st, "other", &info), ATTN_E_FORMAT, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "a checkpoint of 'attn train dates'") != NULL,
                 "%s", attn_ctx_errmsg(ctx));
        attn_st_free(st);
        attn_vit_train_report_free(NULL);
        attn_ctx_free(ctx);
    }
    attn_images_free(&tr);
    attn_images_free(&te);
    tu_rm_tree(dir);
    return tu_finish("test_vit_train");
}
