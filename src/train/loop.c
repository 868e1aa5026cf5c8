/* One training loop for every task (attn_train_run, attn_tasks.h): the schedule, AdamW,
 * clipping, gradient accumulation, data parallelism, time limit, evaluation, checkpoints,
 * resume, the JSON-lines log, TensorBoard events and progress, written once.  A task brings
 * its model and the forward/backward of one share of a step's batch (src/train/dates_task.c,
 * charlm_task.c, lm_task.c; the attn program's vit). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_tasks.h"
#include "../core/file.h"
#include "train_util.h"

/* ATTN_FAIL_IF that jumps to the cleanup label (variable `st` must exist). */
#define FAIL_G(cond, ...)                                                                     \
    do {                                                                                      \
        if (cond) {                                                                           \
            st = attn__fail(ctx, __VA_ARGS__);                                                \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* ---- settings ---------------------------------------------------------------------------- */
static void set_kv(attn_train_setting *s, const char *key, const char *option) {
    s->key = key, s->option = option;
}
void attn_train_setting_i(attn_train_setting *s, const char *key, const char *option,
                          long long v) {
    if (!s) return;
    set_kv(s, key, option);
    snprintf(s->value, sizeof s->value, "%lld", v);
}
void attn_train_setting_f(attn_train_setting *s, const char *key, const char *option,
                          double v) {
    if (!s) return;
    set_kv(s, key, option);
    snprintf(s->value, sizeof s->value, "%.9g", v);
}
void attn_train_setting_s(attn_train_setting *s, const char *key, const char *option,
                          const char *v) {
    if (!s) return;
    set_kv(s, key, option);
    snprintf(s->value, sizeof s->value, "%s", v ? v : "");
}

attn_train_options attn_train_defaults(void) {
    attn_train_options o;
    memset(&o, 0, sizeof o);
    o.steps = 1, o.lr = 1e-3f, o.clip = 1.0f, o.accum = 1;
    return o;
}

static int plain_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

static attn_status check_options(attn_ctx *ctx, const attn_train_task *t,
                                 const attn_train_options *o) {
    ATTN_FAIL_IF(!t || !o, ctx, ATTN_E_INVALID, "attn_train_run: task or options is NULL");
    ATTN_FAIL_IF(!t->model || !t->forward || !t->backward, ctx, ATTN_E_INVALID,
                 "attn_train_run: the task needs a model, forward and backward");
    ATTN_FAIL_IF(!plain_name(t->name) || (t->unit && !plain_name(t->unit)), ctx,
                 ATTN_E_INVALID, "attn_train_run: the task's name and unit must be 1 to 64 "
                 "letters, digits, '_', '-' or '.' (they are written into the log's JSON)");
    ATTN_FAIL_IF(t->nsettings < 0 || (t->nsettings > 0 && !t->settings), ctx, ATTN_E_INVALID,
                 "attn_train_run: %d settings at NULL", t->nsettings);
    for (int i = 0; i < t->nsettings; i++)
        ATTN_FAIL_IF(!t->settings[i].key || !t->settings[i].option, ctx, ATTN_E_INVALID,
                     "attn_train_run: setting %d has no key or option name", i);
    ATTN_FAIL_IF(o->steps < 0, ctx, ATTN_E_INVALID, "steps must be >= 0, got %lld",
                 (long long)o->steps);
    ATTN_FAIL_IF(o->warmup < 0 || o->eval_every < 0 || o->save_every < 0 || o->stop_at < 0,
                 ctx, ATTN_E_INVALID, "warmup, eval_every, save_every and stop_at must be >= 0");
    ATTN_FAIL_IF(!(o->lr > 0.0f && isfinite(o->lr)) || !(o->lr_min >= 0.0f && o->lr_min <= o->lr),
                 ctx, ATTN_E_INVALID, "lr must be positive and finite and 0 <= lr_min <= lr "
                 "(lr %g, lr_min %g)", (double)o->lr, (double)o->lr_min);
    ATTN_FAIL_IF(!(o->weight_decay >= 0.0f && isfinite(o->weight_decay)) || !isfinite(o->clip),
                 ctx, ATTN_E_INVALID, "weight_decay must be >= 0 and finite, clip finite");
    ATTN_FAIL_IF(o->accum < 0 || o->accum > 65536, ctx, ATTN_E_INVALID,
                 "accum must be 1..65536 (0: 1), got %d", o->accum);
    ATTN_FAIL_IF(!(o->time_limit_s >= 0), ctx, ATTN_E_INVALID, "time_limit_s must be >= 0");
    if (o->dp)
        ATTN_FAIL_IF(o->dp->nranks < 1 || o->dp->rank < 0 || o->dp->rank >= o->dp->nranks ||
                         !o->dp->begin || !o->dp->end || !o->dp->sum,
                     ctx, ATTN_E_INVALID, "attn_train_run: bad data-parallel table (rank %d of %d)",
                     o->dp->rank, o->dp->nranks);
    return ATTN_OK;
}

/* ---- the JSON-lines log ------------------------------------------------------------------ */
/* The step of one of our log lines ("{\"task\":...,\"step\":N,..."), or -1. */
static long long line_step(const char *p, size_t n) {
    const char key[] = "\"step\":";
    for (size_t i = 0; i + sizeof key - 1 < n; i++)
        if (!memcmp(p + i, key, sizeof key - 1)) {
            long long v = 0;
            size_t j = i + sizeof key - 1;
            if (j >= n || p[j] < '0' || p[j] > '9') return -1;
            for (; j < n && p[j] >= '0' && p[j] <= '9' && v < (1LL << 50); j++)
                v = v * 10 + (p[j] - '0');
            return v;
        }
    return -1;
}

/* The elapsed_s of one of our log lines (0 if none: a line ends in '\n', so strtod stops). */
static double line_elapsed(const char *p, size_t n) {
    const char key[] = "\"elapsed_s\":";
    for (size_t i = 0; i + sizeof key - 1 < n; i++)
        if (!memcmp(p + i, key, sizeof key - 1)) {
            double v = strtod(p + i + sizeof key - 1, NULL);
            return isfinite(v) && v >= 0 && v < 1e12 ? v : 0.0;
        }
    return 0.0;
}

/* Opens the log for appending.  A new run (step0 0) starts it empty; a resumed one keeps the
 * lines of steps up to step0 (a run killed after logging steps it had not checkpointed logs
 * them again) and whatever else is there; *elapsed0 becomes step0's elapsed_s (the clock goes
 * on from there), if it has a line.  The file is (re)written through attn_file_out (a
 * temporary beside it, renamed; devices and FIFOs in place), then opened to append, never
 * created or truncated here. */
static attn_status log_open(attn_ctx *ctx, const char *path, int64_t step0, int *fd,
                           double *elapsed0) {
    unsigned char *data = NULL;
    size_t len = 0, keep = 0;
    *fd = -1;
    if (step0 > 0) {
        ATTN_TRY(attn__text_file_read(ctx, path, "the training log", 1, &data, &len));
        char *text = (char *)data;
        for (size_t i = 0; text && i < len;) {
            const char *nl = memchr(text + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - text) + 1 : len;
            long long s = line_step(text + i, e - i);
            if (s <= step0) {
                if (s == step0 && nl) *elapsed0 = line_elapsed(text + i, e - i);
                memmove(text + keep, text + i, e - i);
                keep += e - i;
            }
            i = e;
        }
        while (keep && text[keep - 1] != '\n') keep--; /* a torn last line goes */
    }
    attn_file_out *f = NULL;
    attn_status st = attn_file_out_open(ctx, path, &f);
    if (st == ATTN_OK && keep) st = attn_file_out_write(f, data, keep);
    if (st == ATTN_OK) st = attn_file_out_commit(f);
    else attn_file_out_abort(f);
    attn__free(ctx, data);
    ATTN_TRY(st);
    *fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    ATTN_FAIL_IF(*fd < 0, ctx, ATTN_E_IO, "%s: %s", path, strerror(errno));
    return ATTN_OK;
}

static void put_num(char *b, size_t cap, size_t *n, const char *key, double v) {
    if (*n >= cap) return;
    int k = isfinite(v) ? snprintf(b + *n, cap - *n, ",\"%s\":%.9g", key, v)
                        : snprintf(b + *n, cap - *n, ",\"%s\":null", key);
    *n += k > 0 ? (size_t)k : 0;
}

static attn_status log_line(attn_ctx *ctx, int fd, const char *path, const attn_train_task *t,
                            const attn_train_progress *p, double epoch) {
    char b[1024];
    size_t n = 0;
    int k = snprintf(b, sizeof b, "{\"task\":\"%s\",\"step\":%lld,\"steps\":%lld", t->name,
                     (long long)p->step, (long long)p->steps);
    n = k > 0 ? (size_t)k : 0;
    if (epoch >= 0) put_num(b, sizeof b, &n, "epoch", epoch);
    put_num(b, sizeof b, &n, "loss", p->loss);
    put_num(b, sizeof b, &n, "lr", p->lr);
    put_num(b, sizeof b, &n, "grad_norm", p->grad_norm);
    put_num(b, sizeof b, &n, "items_per_s", p->tokens_per_s);
    if (n < sizeof b) {
        k = snprintf(b + n, sizeof b - n, ",\"unit\":\"%s\"", t->unit ? t->unit : "items");
        n += k > 0 ? (size_t)k : 0;
    }
    put_num(b, sizeof b, &n, "elapsed_s", p->elapsed_s);
    put_num(b, sizeof b, &n, "ranks", p->ranks);
    if (p->evaluated) {
        if (p->accuracy >= 0) put_num(b, sizeof b, &n, "eval_accuracy", p->accuracy);
        if (p->val_bpc > 0) put_num(b, sizeof b, &n, "eval_bpc", p->val_bpc);
        if (p->eval_loss > 0) {
            put_num(b, sizeof b, &n, "eval_loss", p->eval_loss);
            put_num(b, sizeof b, &n, "eval_ppl", exp((double)p->eval_loss));
        }
    }
    if (n + 2 >= sizeof b) n = sizeof b - 3; /* cannot happen: bounded fields */
    b[n++] = '}', b[n++] = '\n';
    return attn__fd_write(ctx, fd, path, b, n);
}

/* The log's scalars as one TensorBoard event (tags train/..., eval/...). */
static attn_status tb_step(attn_ctx *ctx, attn__tb *tb, const attn_train_task *t,
                           const attn_train_progress *p) {
    char per_s[96];
    snprintf(per_s, sizeof per_s, "train/%s_per_s", t->unit ? t->unit : "items");
    const char *tags[8];
    float v[8];
    int n = 0;
    tags[n] = "train/loss", v[n++] = p->loss;
    tags[n] = "train/lr", v[n++] = p->lr;
    tags[n] = "train/grad_norm", v[n++] = p->grad_norm;
    tags[n] = per_s, v[n++] = (float)p->tokens_per_s;
    if (p->evaluated) {
        if (p->accuracy >= 0) tags[n] = "eval/accuracy", v[n++] = p->accuracy;
        if (p->val_bpc > 0) tags[n] = "eval/bpc", v[n++] = p->val_bpc;
        if (p->eval_loss > 0) {
            tags[n] = "eval/loss", v[n++] = p->eval_loss;
            tags[n] = "eval/ppl", v[n++] = (float)exp((double)p->eval_loss);
        }
    }
    return attn__tb_scalars(ctx, tb, p->step, tags, v, n);
}

/* ---- checkpoints ------------------------------------------------------------------------- */
static attn_status save(attn_ctx *ctx, const attn_train_task *t, const attn_adamw *opt,
                        int64_t step, const char *path) {
    attn_st_writer *w;
    ATTN_TRY(attn_st_writer_create(ctx, &w));
    attn_status st = attn_st_writer_meta(w, "task", t->name);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "train_step", step);
    for (int i = 0; i < t->nsettings && st == ATTN_OK; i++)
        st = attn_st_writer_meta(w, t->settings[i].key, t->settings[i].value);
    if (st == ATTN_OK && t->describe) st = t->describe(t->user, ctx, w);
    if (st == ATTN_OK) st = attn_module_save(ctx, t->model, w, "model.");
    if (st == ATTN_OK) st = attn_adamw_save(ctx, opt, t->model, w, "optim.");
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

attn_status attn_train_check_settings(attn_ctx *ctx, const attn_st *checkpoint, const char *name,
                                      const attn_train_setting *s, int n) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!checkpoint || n < 0 || (n > 0 && !s), ctx, ATTN_E_INVALID,
                 "attn_train_check_settings: NULL argument");
    if (!name) name = "the checkpoint";
    ATTN_FAIL_IF(!attn_st_meta(checkpoint, "train_step"), ctx, ATTN_E_FORMAT,
                 "%s is not a training checkpoint (it has no train_step): resume from the "
                 "state file a run writes", name);
    for (int i = 0; i < n; i++) {
        ATTN_FAIL_IF(!s[i].key || !s[i].option, ctx, ATTN_E_INVALID,
                     "attn_train_check_settings: setting %d has no key or option name", i);
        const char *v = attn_st_meta(checkpoint, s[i].key);
        ATTN_FAIL_IF(!v || strcmp(v, s[i].value) != 0, ctx, ATTN_E_INVALID,
                     "%s: %s differs from the run being continued (%s there, %s now)", name,
                     s[i].option, v ? v : "(none)", s[i].value);
    }
    return ATTN_OK;
}

/* The checkpoint's task, settings and step, checked; its model and optimiser loaded. */
static attn_status resume_from(attn_ctx *ctx, const attn_train_task *t,
                               const attn_train_options *o, const attn_st *rs, attn_adamw *opt,
                               int64_t *step0) {
    const char *name = o->resume_name ? o->resume_name : "the checkpoint";
    const char *task = attn_st_meta(rs, "task");
    ATTN_FAIL_IF(task && strcmp(task, t->name) != 0, ctx, ATTN_E_INVALID,
                 "%s is a checkpoint of task %s, not %s", name, task, t->name);
    ATTN_TRY(attn_train_check_settings(ctx, rs, name, t->settings, t->nsettings));
    ATTN_TRY(attn__meta_get_i(ctx, rs, "train_step", step0));
    ATTN_FAIL_IF(*step0 < 0 || *step0 > o->steps, ctx, ATTN_E_FORMAT,
                 "%s: train_step %lld is outside 0..%lld (the run's steps)", name,
                 (long long)*step0, (long long)o->steps);
    ATTN_TRY(attn_module_load(ctx, t->model, rs, "model.", 1));
    ATTN_TRY(attn_adamw_load(ctx, opt, t->model, rs, "optim."));
    ATTN_FAIL_IF(attn_adamw_step_count(opt) != *step0, ctx, ATTN_E_FORMAT,
                 "%s: the optimiser has taken %lld steps, train_step says %lld", name,
                 (long long)attn_adamw_step_count(opt), (long long)*step0);
    return ATTN_OK;
}

/* ---- the loop ---------------------------------------------------------------------------- */
attn_status attn_train_run(attn_ctx *ctx, const attn_train_task *t, const attn_train_options *o,
                           const attn_st *resume, attn_train_result *result) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_TRY(check_options(ctx, t, o));
    const attn_train_dp *dp = o->dp;
    const int nranks = dp ? dp->nranks : 1, rank = dp ? dp->rank : 0, rank0 = rank == 0;
    const int accum = o->accum ? o->accum : 1, shares = accum * nranks;
    ATTN_FAIL_IF(shares > (1 << 20), ctx, ATTN_E_INVALID, "accum %d x %d processes is too many "
                 "shares", accum, nranks);
    attn_module *m = t->model;
    attn_adamw *opt = NULL;
    attn_saved *sv = NULL;
    int fd = -1;
    attn__tb tb = {-1, ""};
    int64_t step0 = 0, step = 0;
    double elapsed0 = 0;
    float last_loss = 0.0f;
    attn_train_end end = ATTN_TRAIN_DONE;
    attn_status st;
    ATTN_TRYG(attn_module_enable_grad(ctx, m));
    attn_adamw_config oc = attn_adamw_defaults();
    oc.lr = o->lr;
    oc.weight_decay = o->weight_decay;
    ATTN_TRYG(attn_adamw_create(ctx, m, &oc, &opt));
    ATTN_TRYG(attn_saved_create(ctx, 0, &sv));
    if (resume) ATTN_TRYG(resume_from(ctx, t, o, resume, opt, &step0));
    if (o->log_path && rank0) ATTN_TRYG(log_open(ctx, o->log_path, step0, &fd, &elapsed0));
    if (o->tb_dir && rank0) ATTN_TRYG(attn__tb_open(ctx, o->tb_dir, &tb));
    {
        const int64_t stop_at = o->stop_at && o->stop_at < o->steps ? o->stop_at : o->steps;
        double t0 = attn__now_s(), t_prev = t0;
        for (step = step0; step < stop_at; step++) {
            /* this process's shares, one after another, into the same gradients */
            double loss_sum = 0, count_step = 0, items = 0;
            float loss1 = 0.0f;
            attn_module_zero_grad(m);
            for (int a = 0; a < accum; a++) {
                attn_train_share sh;
                memset(&sh, 0, sizeof sh);
                ATTN_TRYG(t->forward(t->user, ctx, step, rank * accum + a, shares, sv, &sh));
                FAIL_G(!(sh.count >= 0 && sh.count <= sh.count_step), ATTN_E_INVALID,
                               "%s: a share's count %g is outside 0..%g (the step's)", t->name,
                               sh.count, sh.count_step);
                loss1 = sh.loss, loss_sum += (double)sh.loss * sh.count;
                count_step = sh.count_step, items += sh.items;
                float scale = shares == 1 ? 1.0f
                              : sh.count_step > 0 ? (float)(sh.count / sh.count_step) : 0.0f;
                if (dp && a == accum - 1) ATTN_TRYG(dp->begin(dp->user, ctx, m));
                ATTN_TRYG(t->backward(t->user, ctx, sv, scale));
            }
            /* the step's loss and items, and whether any process reached the time limit (then
             * all stop) */
            double xs[3] = {loss_sum, o->time_limit_s > 0 && attn__now_s() - t0 >= o->time_limit_s,
                            items};
            if (dp) {
                ATTN_TRYG(dp->end(dp->user, ctx, m));
                ATTN_TRYG(dp->sum(dp->user, ctx, xs, 3));
            }
            float loss = shares == 1 ? loss1
                         : count_step > 0 ? (float)(xs[0] / count_step) : 0.0f;
            FAIL_G(!isfinite(loss), ATTN_E_NONFINITE,
                           "the loss is %g at step %lld: training diverged (try a lower learning "
                           "rate); the weights are those before this step", (double)loss,
                           (long long)step + 1);
            float gnorm = 0.0f, lr = attn_lr_warmup_cosine(step, o->warmup, o->steps, o->lr,
                                                           o->lr_min);
            if (o->clip >= 0.0f) /* 0: the norm only; negative: not even that */
                ATTN_TRYG(attn_module_clip_grad_norm(ctx, m, o->clip, &gnorm));
            ATTN_TRYG(attn_adamw_step(ctx, opt, m, lr));
            last_loss = loss;
            double now = attn__now_s();
            attn_train_progress p;
            memset(&p, 0, sizeof p);
            p.step = step + 1, p.steps = o->steps, p.loss = loss, p.lr = lr, p.grad_norm = gnorm;
            p.elapsed_s = elapsed0 + (now - t0);
            p.tokens_per_s = xs[2] / (now - t_prev > 1e-9 ? now - t_prev : 1e-9);
            p.eta_s = (now - t0) / (double)(step + 1 - step0) * (double)(o->steps - step - 1);
            p.accuracy = -1.0f;
            p.ranks = nranks;
            t_prev = now;
            int last = step + 1 == stop_at;
            if (last) end = step + 1 == o->steps ? ATTN_TRAIN_DONE : ATTN_TRAIN_STOP_AT;
            if (!last && xs[1] > 0) last = 1, end = ATTN_TRAIN_TIME_LIMIT;
            if (t->evaluate &&
                ((o->eval_every > 0 && (step + 1) % o->eval_every == 0) || last)) {
                int target = 0;
                ATTN_TRYG(t->evaluate(t->user, ctx, step + 1, &p, &target));
                p.evaluated = 1;
                t_prev = attn__now_s(); /* evaluation is not training time */
                if (target && !last) last = 1, end = ATTN_TRAIN_TARGET;
            }
            int saved = 0;
            if (o->state_path && rank0 &&
                (last || (o->save_every > 0 && (step + 1) % o->save_every == 0))) {
                ATTN_TRYG(save(ctx, t, opt, step + 1, o->state_path));
                saved = 1;
            }
            if (fd >= 0) ATTN_TRYG(log_line(ctx, fd, o->log_path, t, &p, -1.0));
            if (tb.fd >= 0) ATTN_TRYG(tb_step(ctx, &tb, t, &p));
            double stop = o->progress && o->progress(o->user, &p);
            if (dp) ATTN_TRYG(dp->sum(dp->user, ctx, &stop, 1)); /* one process stops: all do */
            if (stop > 0 && !last) {
                if (o->state_path && rank0 && !saved)
                    ATTN_TRYG(save(ctx, t, opt, step + 1, o->state_path));
                end = ATTN_TRAIN_STOPPED;
                last = 1;
            }
            if (last) {
                step++;
                break;
            }
        }
        if (result) {
            result->step = step;
            result->loss = last_loss;
            result->end = end;
            result->elapsed_s = elapsed0 + (attn__now_s() - t0);
        }
    }
    st = ATTN_OK;
done:
    if (fd >= 0) close(fd);
    attn__tb_close(&tb);
    attn_saved_free(sv);
    attn_adamw_free(opt);
    return st;
}
