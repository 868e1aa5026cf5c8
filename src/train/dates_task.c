/* `attn train dates`: the training loop, evaluation, translation and checkpoints of the dates
 * task (see attn_dates_train in attn.h).  Progress goes to the caller's callback; the library
 * never prints. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../layers/layers.h"
#include "dates.h"
#include "attn_tasks.h"
#include "train_util.h"

attn_dates_config attn_dates_defaults(void) {
    attn_dates_config c;
    memset(&c, 0, sizeof c);
    c.d_model = 64, c.nhead = 4, c.num_layers = 2, c.dim_feedforward = 256;
    c.dropout = 0.0f, c.norm_first = 1, c.fold_case = 1;
    c.batch = 64, c.steps = 3000, c.warmup = 100;
    c.lr = 2e-3f, c.lr_min = 5e-5f, c.weight_decay = 0.01f, c.clip = 1.0f;
    c.label_smoothing = 0.0f;
    c.seed = 1;
    c.eval_every = 250, c.eval_n = 1000;
    return c;
}


static attn_status check_cfg(attn_ctx *ctx, const attn_dates_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "dates config is NULL");
    ATTN_FAIL_IF(c->batch <= 0 || c->batch > 65536 || c->steps < 0 || c->warmup < 0, ctx,
                 ATTN_E_INVALID, "batch must be in [1, 65536], steps and warmup >= 0");
    ATTN_FAIL_IF(!(c->lr > 0.0f) || !(c->lr_min >= 0.0f) || !(c->clip >= 0.0f), ctx,
                 ATTN_E_INVALID, "lr must be > 0, lr_min and clip >= 0");
    ATTN_FAIL_IF(!(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f), ctx, ATTN_E_INVALID,
                 "label_smoothing must be in [0, 1)");
    ATTN_FAIL_IF(c->eval_n < 0 || c->eval_n > attn__dates_test_count(), ctx, ATTN_E_INVALID,
                 "eval_n must be in [0, %d]", attn__dates_test_count());
    return ATTN_OK;
}

static attn_seq2seq_config model_cfg(const attn_dates_config *c) {
    attn_seq2seq_config q;
    memset(&q, 0, sizeof q);
    q.tf = attn_transformer_defaults(c->d_model, c->nhead);
    q.tf.dim_feedforward = c->dim_feedforward;
    q.tf.dropout = c->dropout;
    q.tf.norm_first = c->norm_first;
    q.tf.num_encoder_layers = q.tf.num_decoder_layers = c->num_layers;
    q.src_vocab = q.tgt_vocab = ATTN__DATES_VOCAB;
    q.max_len = ATTN__DATES_MAX_SRC + 2;
    q.pad_id = ATTN__DATES_PAD;
    return q;
}

static unsigned enc_flags(const attn_dates_config *c) {
    return c->fold_case ? ATTN__DATES_FOLD_CASE : 0u;
}

/* Longest phrase of a set of pairs (at least 1). */
static int longest(const attn__date_pair *p, int n) {
    int m = 1;
    for (int i = 0; i < n; i++) {
        int l = (int)strlen(p[i].src);
        if (l > m) m = l;
    }
    return m;
}

attn_status attn_dates_evaluate(attn_ctx *ctx, const attn_module *model,
                                const attn_dates_config *cfg, int n, uint64_t seed,
                                float *accuracy) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !accuracy, ctx, ATTN_E_INVALID, "NULL argument");
    ATTN_FAIL_IF(n <= 0 || n > attn__dates_test_count(), ctx, ATTN_E_INVALID,
                 "n must be in [1, %d]", attn__dates_test_count());
    attn__mark mk = attn__ws_mark(ctx);
    attn__date_pair *pairs;
    attn_status st;
    int correct = 0;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)n, sizeof *pairs, (void **)&pairs));
    ATTN_TRYG(attn__dates_heldout(ctx, seed, n, pairs));
    const int chunk = 100, T = ATTN__DATES_TGT_LEN;
    for (int first = 0; first < n; first += chunk) {
        int B = n - first < chunk ? n - first : chunk;
        int S = longest(pairs + first, B);
        attn__mark m2 = attn__ws_mark(ctx);
        int64_t *src, *tin, *tout, *out;
        st = attn__ws_alloc(ctx, (size_t)(B * S), sizeof *src, (void **)&src);
        if (st == ATTN_OK) st = attn__ws_alloc(ctx, (size_t)(B * T), sizeof *tin, (void **)&tin);
        if (st == ATTN_OK) st = attn__ws_alloc(ctx, (size_t)(B * T), sizeof *tout, (void **)&tout);
        if (st == ATTN_OK) st = attn__ws_alloc(ctx, (size_t)(B * T), sizeof *out, (void **)&out);
        if (st == ATTN_OK)
            st = attn__dates_encode_pairs(ctx, pairs + first, B, S, enc_flags(cfg), src, NULL,
                                          tin, tout);
        if (st == ATTN_OK) {
            int64_t ss[2] = {B, S}, os[2] = {B, T};
            attn_tensor Src = attn_tensor_make(src, ATTN_I64, 2, ss);
            attn_tensor Out = attn_tensor_make(out, ATTN_I64, 2, os);
            st = attn_seq2seq_greedy(ctx, model, &Src, ATTN__DATES_BOS, ATTN__DATES_EOS, &Out,
                                     NULL);
        }
        if (st == ATTN_OK)
            for (int b = 0; b < B; b++) {
                char text[ATTN__DATES_TGT_LEN + 1];
                attn__dates_decode(out + (int64_t)b * T, T, text, sizeof text);
                correct += strcmp(text, pairs[first + b].tgt) == 0;
            }
        attn__ws_release(ctx, m2);
        if (st != ATTN_OK) goto done;
    }
    *accuracy = (float)correct / (float)n;
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_dates_translate(attn_ctx *ctx, const attn_module *model,
                                 const attn_dates_config *cfg, const char *text, char *iso,
                                 size_t cap, float *cross) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !text || !iso || cap < 11, ctx, ATTN_E_INVALID,
                 "attn_dates_translate: NULL argument or output smaller than 11 bytes");
    int64_t ids[ATTN__DATES_MAX_SRC], out[ATTN__DATES_TGT_LEN];
    int n = attn__dates_encode(text, enc_flags(cfg), ids, ATTN__DATES_MAX_SRC);
    ATTN_FAIL_IF(n < 0, ctx, ATTN_E_INVALID, "the text is longer than %d characters",
                 ATTN__DATES_MAX_SRC);
    ATTN_FAIL_IF(n == 0, ctx, ATTN_E_INVALID, "the text is empty");
    int64_t ss[2] = {1, n}, os[2] = {1, ATTN__DATES_TGT_LEN}, cs[3] = {1, ATTN__DATES_TGT_LEN, n};
    attn_tensor Src = attn_tensor_make(ids, ATTN_I64, 2, ss);
    attn_tensor Out = attn_tensor_make(out, ATTN_I64, 2, os);
    attn_tensor Cr = attn_tensor_make(cross, ATTN_F32, 3, cs);
    ATTN_TRY(attn_seq2seq_greedy(ctx, model, &Src, ATTN__DATES_BOS, ATTN__DATES_EOS, &Out,
                                 cross ? &Cr : NULL));
    attn__dates_decode(out, ATTN__DATES_TGT_LEN, iso, cap);
    return ATTN_OK;
}

/* ---- checkpoints ----------------------------------------------------------------------- */

static attn_status put_cfg(attn_st_writer *w, const attn_dates_config *c) {
    ATTN_TRY(attn_st_writer_meta(w, "task", "dates"));
    ATTN_TRY(attn__meta_put_i(w, "d_model", c->d_model));
    ATTN_TRY(attn__meta_put_i(w, "nhead", c->nhead));
    ATTN_TRY(attn__meta_put_i(w, "num_encoder_layers", c->num_layers));
    ATTN_TRY(attn__meta_put_i(w, "num_decoder_layers", c->num_layers));
    ATTN_TRY(attn__meta_put_i(w, "dim_feedforward", c->dim_feedforward));
    ATTN_TRY(attn__meta_put_f(w, "dropout", c->dropout));
    ATTN_TRY(attn_st_writer_meta(w, "norm_first", c->norm_first ? "true" : "false"));
    ATTN_TRY(attn_st_writer_meta(w, "fold_case", c->fold_case ? "true" : "false"));
    ATTN_TRY(attn__meta_put_i(w, "vocab_size", ATTN__DATES_VOCAB));
    ATTN_TRY(attn__meta_put_i(w, "max_len", ATTN__DATES_MAX_SRC + 2));
    ATTN_TRY(attn__meta_put_i(w, "pad_id", ATTN__DATES_PAD));
    return attn__meta_put_f(w, "label_smoothing", c->label_smoothing);
}

/* The settings a resumed run must share with the run it continues (attn_train_setting):
 * stored in checkpoints as train.KEY, checked before the model is built from one. */
enum { DATES_SETTINGS = 17 };
static int dates_settings(const attn_dates_config *c, const attn_st *resume,
                          attn_train_setting *s) {
    int n = 0;
    ATTN__SETTINGS_MODEL(s, n, c);
    attn_train_setting_i(&s[n++], "train.norm_first", "norm_first", c->norm_first);
    attn_train_setting_i(&s[n++], "train.fold_case", "fold_case", c->fold_case);
    attn_train_setting_f(&s[n++], "train.label_smoothing", "label_smoothing",
                         c->label_smoothing);
    ATTN__SETTINGS_TRAIN(s, n, c);
    return attn__setting_dtype(s, n, c->dtype, resume);
}

static int get_b(const attn_st *st, const char *k) {
    const char *s = attn_st_meta(st, k);
    return s && strcmp(s, "true") == 0;
}

static attn_status read_cfg(attn_ctx *ctx, const attn_st *st, attn_dates_config *c) {
    const char *task = attn_st_meta(st, "task");
    ATTN_FAIL_IF(!task || strcmp(task, "dates") != 0, ctx, ATTN_E_FORMAT,
                 "not a dates checkpoint (metadata task = %s)", task ? task : "(none)");
    *c = attn_dates_defaults();
    int64_t v = 0;
    ATTN_TRY(attn__meta_get_i(ctx, st, "d_model", &c->d_model));
    ATTN_TRY(attn__meta_get_i(ctx, st, "nhead", &c->nhead));
    ATTN_TRY(attn__meta_get_i(ctx, st, "num_encoder_layers", &c->num_layers));
    ATTN_TRY(attn__meta_get_i(ctx, st, "dim_feedforward", &c->dim_feedforward));
    ATTN_TRY(attn__meta_get_f(ctx, st, "dropout", &c->dropout));
    c->norm_first = get_b(st, "norm_first");
    c->fold_case = get_b(st, "fold_case");
    ATTN_TRY(attn__meta_get_i(ctx, st, "vocab_size", &v));
    ATTN_FAIL_IF(v != ATTN__DATES_VOCAB, ctx, ATTN_E_FORMAT,
                 "checkpoint vocabulary has %lld tokens, this attn has %d", (long long)v,
                 ATTN__DATES_VOCAB);
    return attn__meta_get_f(ctx, st, "label_smoothing", &c->label_smoothing);
}

attn_status attn_dates_save(attn_ctx *ctx, const attn_module *model, const attn_dates_config *cfg,
                            const char *path) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !path, ctx, ATTN_E_INVALID, "attn_dates_save: NULL argument");
    attn_st_writer *w;
    ATTN_TRY(attn_st_writer_create(ctx, &w));
    attn_status st = put_cfg(w, cfg);
    if (st == ATTN_OK) st = attn_module_save(ctx, model, w, NULL);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

static attn_status load_model(attn_ctx *ctx, const attn_st *st, const char *prefix,
                              attn_dates_config *cfg, attn_module **model) {
    ATTN_TRY(read_cfg(ctx, st, cfg));
    attn_seq2seq_config q = model_cfg(cfg);
    /* built from the file: each parameter must be there as it is registered */
    attn__param_source(ctx, st, prefix);
    attn_status s = attn_seq2seq_create(ctx, &q, model);
    attn__param_source(ctx, NULL, NULL);
    ATTN_TRY(s);
    s = attn_module_load(ctx, *model, st, prefix, 1);
    if (s != ATTN_OK) {
        attn_module_free(*model);
        *model = NULL;
    }
    return s;
}

attn_status attn_dates_load(attn_ctx *ctx, const char *path, attn_dates_config *cfg,
                            attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !cfg || !model, ctx, ATTN_E_INVALID, "attn_dates_load: NULL argument");
    *model = NULL;
    attn_st *st;
    ATTN_TRY(attn_st_read_file(ctx, path, &st));
    attn_status s = load_model(ctx, st, NULL, cfg, model);
    attn_st_free(st);
    return s;
}

/* ---- training: a task of attn_train_run ------------------------------------------------ */
typedef struct dates_run {
    attn_dates_config c;
    attn_module *m;
    attn__date_pair *pairs;
    int64_t *src, *tin, *tout;
    float *logits, *dlogits;
    int64_t encoded; /* the step whose global batch src, tin, tout hold (-1: none) */
    int S, rows;     /* its padded source length; the rows of the last share run */
} dates_run;

/* Share `share` of `shares` takes examples [share B/shares, (share + 1) B/shares) of each global
 * batch of B.  The whole global batch is encoded (cheap), so that the padded source length S
 * and the step's count of target tokens are those of one process. */
static attn_status dates_forward(void *user, attn_ctx *ctx, int64_t step, int share, int shares,
                                 attn_saved *sv, attn_train_share *out) {
    dates_run *r = user;
    const attn_dates_config *c = &r->c;
    const int B = (int)c->batch, T = ATTN__DATES_TGT_LEN, V = ATTN__DATES_VOCAB;
    const int Bl = B / shares, r0 = share * Bl;
    if (r->encoded != step) {
        for (int b = 0; b < B; b++)
            attn__dates_example(c->seed, ATTN__DATES_TRAIN, (uint64_t)(step * B + b), &r->pairs[b]);
        r->S = longest(r->pairs, B);
        ATTN_TRY(attn__dates_encode_pairs(ctx, r->pairs, B, r->S, enc_flags(c), r->src, NULL,
                                          r->tin, r->tout));
        r->encoded = step;
    }
    const int S = r->S;
    int64_t ss[2] = {Bl, S}, ts[2] = {Bl, T}, ls[3] = {Bl, T, V}, l2[2] = {(int64_t)Bl * T, V},
            t1[1] = {(int64_t)Bl * T};
    attn_tensor Src = attn_tensor_make(r->src + (int64_t)r0 * S, ATTN_I64, 2, ss);
    attn_tensor Tin = attn_tensor_make(r->tin + (int64_t)r0 * T, ATTN_I64, 2, ts);
    attn_tensor Lg = attn_tensor_make(r->logits, ATTN_F32, 3, ls);
    attn_tensor Lg2 = attn_tensor_make(r->logits, ATTN_F32, 2, l2);
    attn_tensor DLg2 = attn_tensor_make(r->dlogits, ATTN_F32, 2, l2);
    attn_tensor Tout = attn_tensor_make(r->tout + (int64_t)r0 * T, ATTN_I64, 1, t1);
    int64_t nloc = 0, nglob = 0; /* target tokens (not padding): this share's, the step's */
    for (int64_t i = 0; i < (int64_t)B * T; i++)
        if (r->tout[i] != ATTN__DATES_PAD)
            nglob++, nloc += i >= (int64_t)r0 * T && i < (int64_t)(r0 + Bl) * T;
    /* each step has its own block of dropout offsets; a share draws its rows' masks */
    attn_run run = {c->dropout > 0.0f, c->seed, (uint64_t)step << 16, r0};
    ATTN_TRY(attn_seq2seq_forward_train(ctx, r->m, &Src, &Tin, &run, &Lg, sv));
    ATTN_TRY(attn_cross_entropy(ctx, &Lg2, &Tout, ATTN__DATES_PAD, c->label_smoothing,
                                &out->loss, &DLg2));
    r->rows = Bl;
    out->count = (double)nloc, out->count_step = (double)nglob;
    out->items = (double)Bl * (S + T);
    return ATTN_OK;
}

static attn_status dates_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    dates_run *r = user;
    int64_t ls[3] = {r->rows, ATTN__DATES_TGT_LEN, ATTN__DATES_VOCAB};
    if (scale != 1.0f) attn__scale_f(r->dlogits, ls[0] * ls[1] * ls[2], scale);
    attn_tensor DLg = attn_tensor_make(r->dlogits, ATTN_F32, 3, ls);
    return attn_seq2seq_backward_saved(ctx, r->m, sv, &DLg);
}

static attn_status dates_evaluate(void *user, attn_ctx *ctx, int64_t step, attn_train_progress *p,
                                  int *stop) {
    dates_run *r = user;
    (void)step;
    if (r->c.eval_n <= 0) return ATTN_OK;
    ATTN_TRY(attn_dates_evaluate(ctx, r->m, &r->c, r->c.eval_n, r->c.seed, &p->accuracy));
    *stop = r->c.target_accuracy > 0 && p->accuracy >= r->c.target_accuracy;
    return ATTN_OK;
}

static attn_status dates_describe(void *user, attn_ctx *ctx, attn_st_writer *w) {
    (void)ctx;
    return put_cfg(w, &((dates_run *)user)->c);
}


attn_status attn_dates_train(attn_ctx *ctx, const attn_dates_config *cfg, const char *resume_path,
                             attn_progress_fn progress, void *user, attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model, ctx, ATTN_E_INVALID, "attn_dates_train: model is NULL");
    *model = NULL;
    ATTN_TRY(check_cfg(ctx, cfg));
    ATTN_TRY(attn__dp_check(ctx, cfg->dp, cfg->accum, cfg->batch, "attn_dates_train"));
    dates_run r;
    memset(&r, 0, sizeof r);
    r.c = *cfg;
    r.encoded = -1;
    const attn_dates_config *c = &r.c;
    attn_seq2seq_config qc = model_cfg(c);
    attn_st *rs = NULL;
    attn_status st;
    attn__mark mk = attn__ws_mark(ctx);
    attn_train_setting set[DATES_SETTINGS];
    int nset = dates_settings(c, NULL, set);
    if (resume_path) { /* checked before the model is built: it is built from the file */
        attn_dates_config saved;
        ATTN_TRYG(attn_st_read_file(ctx, resume_path, &rs));
        ATTN_TRYG(read_cfg(ctx, rs, &saved));
        nset = dates_settings(c, rs, set);
        ATTN_TRYG(attn_train_check_settings(ctx, rs, resume_path, set, nset));
    }
    attn__param_source(ctx, rs, "model.");
    st = attn_seq2seq_create(ctx, &qc, &r.m);
    attn__param_source(ctx, NULL, NULL);
    if (st != ATTN_OK) goto done;
    ATTN_TRYG(attn_module_init(ctx, r.m, c->seed));
    {
        const int B = (int)c->batch, T = ATTN__DATES_TGT_LEN, V = ATTN__DATES_VOCAB;
        const int Bl = (int)(B / ((c->dp ? c->dp->nranks : 1) * (c->accum ? c->accum : 1)));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, sizeof *r.pairs, (void **)&r.pairs));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * ATTN__DATES_MAX_SRC, sizeof *r.src,
                                 (void **)&r.src));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * T, sizeof *r.tin, (void **)&r.tin));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * T, sizeof *r.tout, (void **)&r.tout));
        ATTN_TRYG(attn__ws_f32(ctx, &r.logits, Bl, T, V, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &r.dlogits, Bl, T, V, 1));
    }
    {
        attn_train_task task = {"dates", "tokens", r.m, &r, dates_forward, dates_backward,
                                dates_evaluate, dates_describe, set, nset};
        attn_train_options o;
        ATTN__TRAIN_OPTIONS(o, *c, resume_path, progress, user);
        ATTN_TRYG(attn_train_run(ctx, &task, &o, rs, NULL));
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    attn_st_free(rs);
    if (st == ATTN_OK) *model = r.m;
    else attn_module_free(r.m);
    return st;
}
