/* The one training loop (attn_train_run, src/train/loop.c), through the charlm task and a task
 * of its own: gradient accumulation gives the larger batch's losses, with dropout too (within
 * 1e-5 relative over 20 steps), a run stopped by its progress callback writes a checkpoint and resumes to the
 * uninterrupted run's losses and checkpoint bytes, the JSON-lines log has one line per step
 * (evaluations on theirs) and a resumed run drops the lines of steps it redoes, a resume with
 * another setting is refused naming the option and both values, and a non-finite loss stops
 * the run before the step with ATTN_E_NONFINITE, the weights untouched. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_tasks.h"
#include "testutil.h"

static attn_ctx *ctx;
static char dir[] = "/tmp/attn_loop_XXXXXX";

static const char *TEXT =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
    "was the season of Light, it was the season of Darkness, it was the spring of hope, it "
    "was the winter of despair, we had everything before us, we had nothing before us.\n";

static attn_charlm_config tiny(void) {
    attn_charlm_config c = attn_charlm_defaults();
    c.d_model = 32, c.nhead = 2, c.num_layers = 1, c.dim_feedforward = 64;
    c.block_size = 16, c.batch = 8, c.steps = 20, c.warmup = 3;
    c.lr = 1e-2f, c.lr_min = 1e-3f, c.seed = 3, c.eval_every = 5;
    return c;
}

typedef struct rec {
    float loss[64];
    int n, stop_at;
} rec;
static int record(void *user, const attn_train_progress *p) {
    rec *r = user;
    if (r->n < 64) r->loss[r->n++] = p->loss;
    return r->stop_at > 0 && p->step >= r->stop_at;
}

/* records each step's grad_norm (in rec.loss) */
static int norm_seen(void *user, const attn_train_progress *p) {
    rec *r = user;
    if (r->n < 64) r->loss[r->n++] = p->grad_norm;
    return 0;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    *n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (b) b[*n] = 0;
    return b;
}

/* The log's lines: their count, and steps[i] of line i (each must be an object with "step"). */
static int log_steps(const char *path, int *steps, int cap, int *evals) {
    size_t n;
    char *b = slurp(path, &n);
    int k = 0;
    *evals = 0;
    if (!b) return -1;
    for (char *line = strtok(b, "\n"); line; line = strtok(NULL, "\n")) {
        char *s = strstr(line, "\"step\":");
        TU_CHECK(line[0] == '{' && line[strlen(line) - 1] == '}' && s, "bad log line: %s", line);
        TU_CHECK(strstr(line, "\"task\":\"charlm\"") && strstr(line, "\"unit\":\"tokens\"") &&
                     strstr(line, "\"ranks\":1") && strstr(line, "\"grad_norm\":"),
                 "log line lacks fields: %s", line);
        *evals += strstr(line, "\"eval_bpc\":") != NULL;
        if (s && k < cap) steps[k++] = atoi(s + 7);
    }
    free(b);
    return k;
}

/* accum 4 against one batch: the same losses within 1e-5 relative over 20 steps, without
 * dropout and with it (each micro-batch draws its rows' masks of the whole batch:
 * attn_run.batch_first) */
static void accum_case(float dropout) {
    attn_charlm_config c = tiny();
    c.dropout = dropout;
    rec a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    attn_module *m1 = NULL, *m2 = NULL;
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), NULL, record, &a, &m1), ATTN_OK, ctx);
    c.accum = 4;
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), NULL, record, &b, &m2), ATTN_OK, ctx);
    TU_CHECK(a.n == 20 && b.n == 20, "steps %d and %d", a.n, b.n);
    double worst = 0;
    for (int i = 0; i < a.n && i < b.n; i++) {
        double d = fabs((double)a.loss[i] - b.loss[i]) / fabs((double)a.loss[i]);
        if (!(d <= worst)) worst = d;
    }
    TU_CHECK(worst <= 1e-5, "accum 4 vs one batch (dropout %g): largest relative loss "
             "difference %.3g", dropout, worst);
    printf("accum 4, dropout %g: largest relative loss difference to one batch over 20 steps "
           "%.3g\n", dropout, worst);
    attn_module_free(m2), m2 = NULL;
    c.accum = 3; /* 8 rows do not split in 3 */
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), NULL, NULL, NULL, &m2), ATTN_E_INVALID,
              ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "accum 3"), "message: %s", attn_ctx_errmsg(ctx));
    attn_module_free(m1);
    attn_module_free(m2);
}

static void test_accum(void) {
    accum_case(0.0f);
    accum_case(0.2f);
}

static void test_stop_resume_log(void) {
    char full[256], part[256], lfull[256], lpart[256];
    snprintf(full, sizeof full, "%s/full.st", dir);
    snprintf(part, sizeof part, "%s/part.st", dir);
    snprintf(lfull, sizeof lfull, "%s/full.jsonl", dir);
    snprintf(lpart, sizeof lpart, "%s/part.jsonl", dir);
    attn_charlm_config c = tiny();
    rec a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    attn_module *m = NULL;
    c.state_path = full, c.log_path = lfull;
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), NULL, record, &a, &m), ATTN_OK, ctx);
    attn_module_free(m), m = NULL;
    int steps[64], evals, k = log_steps(lfull, steps, 64, &evals);
    TU_CHECK(k == 20, "%d log lines for 20 steps", k);
    for (int i = 0; i < k; i++) TU_CHECK(steps[i] == i + 1, "line %d is step %d", i, steps[i]);
    TU_CHECK(evals == 4, "%d evaluations logged, 4 expected (every 5 steps)", evals);

    /* stopped by the callback at step 7 (no periodic checkpoint): a checkpoint of step 7 */
    c.state_path = part, c.log_path = lpart, b.stop_at = 7;
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), NULL, record, &b, &m), ATTN_OK, ctx);
    attn_module_free(m), m = NULL;
    TU_CHECK(b.n == 7, "stopped run took %d steps", b.n);
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_read_file(ctx, part, &st), ATTN_OK, ctx)) {
        const char *s = attn_st_meta(st, "train_step"), *t = attn_st_meta(st, "task");
        TU_CHECK(s && !strcmp(s, "7") && t && !strcmp(t, "charlm"), "checkpoint step %s task %s",
                 s ? s : "(none)", t ? t : "(none)");
        attn_st_free(st);
    }
    /* the log as a run killed after logging steps 8 and 9 leaves it */
    FILE *f = fopen(lpart, "ab");
    if (f) {
        fputs("{\"task\":\"charlm\",\"step\":8,\"loss\":9}\n{\"task\":\"charlm\",\"step\":9,\"lo", f);
        fclose(f);
    }
    b.stop_at = 0;
    TU_STATUS(attn_charlm_train(ctx, &c, TEXT, strlen(TEXT), part, record, &b, &m), ATTN_OK, ctx);
    attn_module_free(m), m = NULL;
    TU_CHECK(b.n == 20, "stopped + resumed: %d steps", b.n);
    for (int i = 0; i < 20 && i < b.n; i++)
        TU_CHECK(a.loss[i] == b.loss[i], "step %d: resumed loss %.9g, uninterrupted %.9g", i + 1,
                 (double)b.loss[i], (double)a.loss[i]);
    size_t n1, n2;
    char *x = slurp(full, &n1), *y = slurp(part, &n2);
    TU_CHECK(x && y && n1 == n2 && !memcmp(x, y, n1), "the checkpoints differ (%zu, %zu bytes)", n1,
             n2);
    free(x), free(y);
    k = log_steps(lpart, steps, 64, &evals);
    TU_CHECK(k == 20, "%d lines in the resumed run's log, 20 expected", k);
    for (int i = 0; i < k; i++) TU_CHECK(steps[i] == i + 1, "resumed log: line %d is step %d", i,
                                         steps[i]);
}

/* A task of its own on a feed-forward block (E 3, F 4): the loss is the mean of y^2; forward
 * can be told to report a NaN loss. */
typedef struct lin_task {
    attn_module *m;
    float x[4 * 3], y[4 * 3], dy[4 * 3];
    int nan_at;
} lin_task;
static attn_status lin_forward(void *user, attn_ctx *c, int64_t step, int share, int shares,
                               attn_saved *sv, attn_train_share *out) {
    lin_task *t = user;
    (void)sv, (void)share, (void)shares;
    attn_tensor X = attn_view2(t->x, 4, 3), Y = attn_view2(t->y, 4, 3);
    attn_status st = attn_ffn_forward(c, t->m, &X, NULL, &Y);
    if (st != ATTN_OK) return st;
    double s = 0;
    for (int i = 0; i < 12; i++) s += t->y[i] * t->y[i], t->dy[i] = 2 * t->y[i] / 12;
    out->loss = step == t->nan_at ? NAN : (float)(s / 12);
    out->count = out->count_step = 12, out->items = 4;
    return ATTN_OK;
}
static attn_status lin_backward(void *user, attn_ctx *c, attn_saved *sv, float scale) {
    lin_task *t = user;
    (void)sv, (void)scale;
    attn_tensor X = attn_view2(t->x, 4, 3), DY = attn_view2(t->dy, 4, 3);
    return attn_ffn_backward(c, t->m, &X, NULL, &DY, NULL);
}

static void test_custom_nan_settings(void) {
    lin_task t;
    memset(&t, 0, sizeof t);
    tu_fill(t.x, 12, 5, -1, 1);
    t.nan_at = -1;
    attn_transformer_config fc = attn_transformer_defaults(3, 1);
    fc.dim_feedforward = 4, fc.dropout = 0;
    if (!TU_STATUS(attn_ffn_create(ctx, &fc, &t.m), ATTN_OK, ctx)) return;
    TU_STATUS(attn_module_init(ctx, t.m, 1), ATTN_OK, ctx);
    char ck[256];
    snprintf(ck, sizeof ck, "%s/lin.st", dir);
    attn_train_setting set[2];
    attn_train_setting_i(&set[0], "train.width", "--width", 3);
    attn_train_setting_s(&set[1], "train.data", "--data", "x.bin");
    attn_train_task task = {"toy", "rows", t.m, &t, lin_forward, lin_backward, NULL, NULL, set, 2};
    attn_train_options o = attn_train_defaults();
    o.steps = 6, o.lr = 1e-2f, o.state_path = ck, o.resume_name = ck;
    attn_train_result res;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, &res), ATTN_OK, ctx);
    TU_CHECK(res.step == 6 && res.end == ATTN_TRAIN_DONE && res.loss > 0, "result step %lld end %d",
             (long long)res.step, (int)res.end);
    /* a NaN at step 3 (0-based 2): refused before the step, weights as after step 2 */
    float w_before[12], w_after[12];
    attn_tensor W;
    attn_module_free(t.m), t.m = NULL;
    TU_STATUS(attn_ffn_create(ctx, &fc, &t.m), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, t.m, 1), ATTN_OK, ctx);
    task.model = t.m;
    o.state_path = NULL, o.stop_at = 2;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, &res), ATTN_OK, ctx);
    TU_CHECK(res.step == 2 && res.end == ATTN_TRAIN_STOP_AT, "stop_at 2: step %lld end %d",
             (long long)res.step, (int)res.end);
    if (TU_STATUS(attn_module_param(ctx, t.m, "w_1.weight", &W), ATTN_OK, ctx))
        memcpy(w_before, W.data, sizeof w_before);
    attn_module_free(t.m), t.m = NULL;
    TU_STATUS(attn_ffn_create(ctx, &fc, &t.m), ATTN_OK, ctx);
    TU_STATUS(attn_module_init(ctx, t.m, 1), ATTN_OK, ctx);
    task.model = t.m, t.nan_at = 2, o.stop_at = 0;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_NONFINITE, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "step 3"), "message: %s", attn_ctx_errmsg(ctx));
    if (TU_STATUS(attn_module_param(ctx, t.m, "w_1.weight", &W), ATTN_OK, ctx)) {
        memcpy(w_after, W.data, sizeof w_after);
        TU_CHECK(!memcmp(w_before, w_after, sizeof w_after),
                 "the step with a NaN loss changed the weights");
    }
    /* resume with another setting: named, with both values */
    t.nan_at = -1;
    attn_st *st = NULL;
    if (TU_STATUS(attn_st_read_file(ctx, ck, &st), ATTN_OK, ctx)) {
        attn_train_setting_s(&set[1], "train.data", "--data", "y.bin");
        TU_STATUS(attn_train_run(ctx, &task, &o, st, NULL), ATTN_E_INVALID, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "--data differs from the run being continued "
                                              "(x.bin there, y.bin now)"),
                 "message: %s", attn_ctx_errmsg(ctx));
        attn_train_setting_s(&set[1], "train.data", "--data", "x.bin");
        task.name = "other";
        TU_STATUS(attn_train_run(ctx, &task, &o, st, NULL), ATTN_E_INVALID, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "checkpoint of task toy, not other"), "message: %s",
                 attn_ctx_errmsg(ctx));
        task.name = "toy";
        /* the same check alone (as dates and charlm make it before building their model) */
        TU_STATUS(attn_train_check_settings(ctx, st, "ck", set, 2), ATTN_OK, ctx);
        attn_train_setting_i(&set[0], "train.width", "--width", 4);
        TU_STATUS(attn_train_check_settings(ctx, st, NULL, set, 2), ATTN_E_INVALID, ctx);
        TU_CHECK(strstr(attn_ctx_errmsg(ctx), "the checkpoint: --width differs from the run "
                                              "being continued (3 there, 4 now)"),
                 "message: %s", attn_ctx_errmsg(ctx));
        attn_train_setting_i(&set[0], "train.width", "--width", 3);
        TU_STATUS(attn_train_check_settings(ctx, NULL, "ck", set, 2), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_train_check_settings(ctx, st, "ck", NULL, 2), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_train_check_settings(ctx, st, "ck", set, -1), ATTN_E_INVALID, ctx);
        TU_STATUS(attn_train_check_settings(NULL, st, "ck", set, 2), ATTN_E_INVALID, NULL);
        TU_STATUS(attn_train_run(ctx, &task, &o, st, &res), ATTN_OK, ctx); /* finished: 0 steps */
        TU_CHECK(res.step == 6, "resumed finished run at step %lld", (long long)res.step);
        attn_st_free(st);
    }
    /* clip 0 reports the norm and changes nothing; clip < 0 skips the norm: the same weights */
    {
        float w0[12], w1[12];
        rec r0, r1;
        memset(&r0, 0, sizeof r0), memset(&r1, 0, sizeof r1);
        attn_train_options oc = attn_train_defaults();
        oc.steps = 3, oc.lr = 1e-2f;
        for (int k = 0; k < 2; k++) {
            attn_module_free(t.m), t.m = NULL;
            TU_STATUS(attn_ffn_create(ctx, &fc, &t.m), ATTN_OK, ctx);
            TU_STATUS(attn_module_init(ctx, t.m, 1), ATTN_OK, ctx);
            task.model = t.m;
            oc.clip = k ? -1.0f : 0.0f, oc.progress = norm_seen, oc.user = k ? &r1 : &r0;
            TU_STATUS(attn_train_run(ctx, &task, &oc, NULL, NULL), ATTN_OK, ctx);
            if (TU_STATUS(attn_module_param(ctx, t.m, "w_1.weight", &W), ATTN_OK, ctx))
                memcpy(k ? w1 : w0, W.data, sizeof w0);
        }
        TU_CHECK(r0.n == 3 && r1.n == 3 && r0.loss[0] > 0 && r1.loss[0] == 0,
                 "grad_norm: clip 0 %g, clip -1 %g", (double)r0.loss[0], (double)r1.loss[0]);
        TU_CHECK(!memcmp(w0, w1, sizeof w0), "clip -1 trained other weights than clip 0");
    }
    /* bad options */
    o.clip = NAN;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    o.clip = 1.0f, o.accum = -1;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    o.accum = 1, o.lr_min = 1.0f;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    o.lr_min = 0, task.name = "a\"b";
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    task.name = "toy", task.unit = "";
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    task.unit = NULL, task.forward = NULL;
    TU_STATUS(attn_train_run(ctx, &task, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_train_run(ctx, NULL, &o, NULL, NULL), ATTN_E_INVALID, ctx);
    attn_module_free(t.m);
}

int main(void) {
    ctx = tu_ctx(2);
    if (!ctx || !mkdtemp(dir)) return 1;
    test_accum();
    test_stop_resume_log();
    test_custom_nan_settings();
    attn_ctx_free(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tu_finish("test_train_loop");
}
