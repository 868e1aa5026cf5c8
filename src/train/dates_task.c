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
    ATTN_TRY(attn__meta_put_f(w, "label_smoothing", c->label_smoothing));
    /* training settings, so a resumed run can check it continues the same run */
    attn__train_meta tm = ATTN__TRAIN_META((attn_dates_config *)c);
    return attn__train_meta_put(w, &tm);
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
    ATTN_TRY(attn__meta_get_f(ctx, st, "label_smoothing", &c->label_smoothing));
    attn__train_meta tm = ATTN__TRAIN_META(c);
    ATTN_TRY(attn__train_meta_get(ctx, st, &tm));
    return ATTN_OK;
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

static attn_status save_state(attn_ctx *ctx, const attn_module *m, const attn_adamw *opt,
                              const attn_dates_config *cfg, int64_t step, const char *path) {
    attn_st_writer *w;
    ATTN_TRY(attn_st_writer_create(ctx, &w));
    attn_status st = put_cfg(w, cfg);
    if (st == ATTN_OK) st = attn__meta_put_i(w, "train_step", step);
    if (st == ATTN_OK) st = attn_module_save(ctx, m, w, "model.");
    if (st == ATTN_OK) st = attn_adamw_save(ctx, opt, m, w, "optim.");
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

/* ---- training ---------------------------------------------------------------------------- */
attn_status attn_dates_train(attn_ctx *ctx, const attn_dates_config *cfg, const char *resume_path,
                             attn_progress_fn progress, void *user, attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model, ctx, ATTN_E_INVALID, "attn_dates_train: model is NULL");
    *model = NULL;
    ATTN_TRY(check_cfg(ctx, cfg));
    ATTN_TRY(attn__dp_check(ctx, cfg->dp, cfg->batch, "attn_dates_train"));
    attn_dates_config c = *cfg;
    const attn_train_dp *dp = c.dp;
    attn_seq2seq_config qc = model_cfg(&c);
    attn_module *m = NULL;
    attn_adamw *opt = NULL;
    attn_saved *sv = NULL; /* each step's activations, from its forward to its backward */
    attn_st *rs = NULL;
    int64_t step0 = 0;
    attn_status st;
    attn__mark mk = attn__ws_mark(ctx);
    if (resume_path) { /* checked before the model is built: it is built from the file */
        attn_dates_config saved;
        ATTN_TRYG(attn_st_read_file(ctx, resume_path, &rs));
        ATTN_TRYG(read_cfg(ctx, rs, &saved));
        if (saved.d_model != c.d_model || saved.nhead != c.nhead ||
            saved.num_layers != c.num_layers || saved.dim_feedforward != c.dim_feedforward ||
            saved.batch != c.batch || saved.seed != c.seed) {
            st = attn__fail(ctx, ATTN_E_INVALID, "%s was written by a run with another model, "
                            "batch or seed", resume_path);
            goto done;
        }
        ATTN_TRYG(attn__meta_get_i(ctx, rs, "train_step", &step0));
    }
    attn__param_source(ctx, rs, "model.");
    st = attn_seq2seq_create(ctx, &qc, &m);
    attn__param_source(ctx, NULL, NULL);
    if (st != ATTN_OK) goto done;
    ATTN_TRYG(attn_module_init(ctx, m, c.seed));
    ATTN_TRYG(attn_module_enable_grad(ctx, m));
    attn_adamw_config oc = attn_adamw_defaults();
    oc.lr = c.lr;
    oc.weight_decay = c.weight_decay;
    ATTN_TRYG(attn_adamw_create(ctx, m, &oc, &opt));
    ATTN_TRYG(attn_saved_create(ctx, 0, &sv));
    if (rs) {
        ATTN_TRYG(attn_module_load(ctx, m, rs, "model.", 1));
        ATTN_TRYG(attn_adamw_load(ctx, opt, m, rs, "optim."));
    }
    {
        const int B = (int)c.batch, T = ATTN__DATES_TGT_LEN, V = ATTN__DATES_VOCAB;
        /* this rank's share of each global batch: examples [r0, r0 + Bl).  Every rank
         * encodes the whole global batch (cheap), so that the padded source length S and the
         * global count of target tokens are those of one process */
        const int Bl = dp ? B / dp->nranks : B, r0 = dp ? dp->rank * Bl : 0;
        double t0 = attn__now_s(), t_prev = t0;
        attn__date_pair *pairs;
        int64_t *src, *tin, *tout;
        float *logits, *dlogits;
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, sizeof *pairs, (void **)&pairs));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * ATTN__DATES_MAX_SRC, sizeof *src, (void **)&src));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * T, sizeof *tin, (void **)&tin));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B * T, sizeof *tout, (void **)&tout));
        ATTN_TRYG(attn__ws_f32(ctx, &logits, Bl, T, V, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dlogits, Bl, T, V, 1));
        for (int64_t step = step0; step < c.steps; step++) {
            for (int b = 0; b < B; b++)
                attn__dates_example(c.seed, ATTN__DATES_TRAIN, (uint64_t)(step * B + b), &pairs[b]);
            int S = longest(pairs, B);
            ATTN_TRYG(attn__dates_encode_pairs(ctx, pairs, B, S, enc_flags(&c), src, NULL, tin, tout));
            int64_t ss[2] = {Bl, S}, ts[2] = {Bl, T}, ls[3] = {Bl, T, V},
                    l2[2] = {(int64_t)Bl * T, V}, t1[1] = {(int64_t)Bl * T};
            attn_tensor Src = attn_tensor_make(src + (int64_t)r0 * S, ATTN_I64, 2, ss);
            attn_tensor Tin = attn_tensor_make(tin + (int64_t)r0 * T, ATTN_I64, 2, ts);
            attn_tensor Lg = attn_tensor_make(logits, ATTN_F32, 3, ls);
            attn_tensor Lg2 = attn_tensor_make(logits, ATTN_F32, 2, l2);
            attn_tensor DLg = attn_tensor_make(dlogits, ATTN_F32, 3, ls);
            attn_tensor DLg2 = attn_tensor_make(dlogits, ATTN_F32, 2, l2);
            attn_tensor Tout = attn_tensor_make(tout + (int64_t)r0 * T, ATTN_I64, 1, t1);
            int64_t nloc = 0, nglob = 0; /* target tokens (not padding): here, everywhere */
            for (int64_t i = 0; i < (int64_t)B * T; i++)
                if (tout[i] != ATTN__DATES_PAD)
                    nglob++, nloc += i >= (int64_t)r0 * T && i < (int64_t)(r0 + Bl) * T;
            /* each step has its own block of dropout offsets */
            attn_run run = {c.dropout > 0.0f, c.seed, (uint64_t)step << 16};
            float loss, gnorm = 0.0f, lr = attn_lr_warmup_cosine(step, c.warmup, c.steps, c.lr,
                                                                 c.lr_min);
            ATTN_TRYG(attn_seq2seq_forward_train(ctx, m, &Src, &Tin, &run, &Lg, sv));
            ATTN_TRYG(attn_cross_entropy(ctx, &Lg2, &Tout, ATTN__DATES_PAD, c.label_smoothing,
                                         &loss, &DLg2));
            attn_module_zero_grad(m);
            /* data parallel: this rank's mean loss gradient scaled to its share of the global
             * token count, so that the ranks' gradients sum to the global mean's */
            if (dp) {
                attn__scale_f(dlogits, (int64_t)Bl * T * V,
                              nglob ? (float)((double)nloc / (double)nglob) : 0.0f);
                ATTN_TRYG(dp->begin(dp->user, ctx, m));
            }
            ATTN_TRYG(attn_seq2seq_backward_saved(ctx, m, sv, &DLg));
            double xs[2] = {(double)loss * (double)nloc,
                            c.time_limit_s > 0 && attn__now_s() - t0 >= c.time_limit_s};
            if (dp) {
                ATTN_TRYG(dp->end(dp->user, ctx, m));
                ATTN_TRYG(dp->sum(dp->user, ctx, xs, 2));
                loss = nglob ? (float)(xs[0] / (double)nglob) : 0.0f;
            }
            ATTN_TRYG(attn_module_clip_grad_norm(ctx, m, c.clip, &gnorm));
            ATTN_TRYG(attn_adamw_step(ctx, opt, m, lr));
            double t = attn__now_s();
            attn_train_progress p;
            memset(&p, 0, sizeof p);
            p.step = step + 1, p.steps = c.steps, p.loss = loss, p.lr = lr, p.grad_norm = gnorm;
            p.elapsed_s = t - t0;
            p.tokens_per_s = (double)B * (S + T) / (t - t_prev > 1e-9 ? t - t_prev : 1e-9);
            p.eta_s = p.elapsed_s / (double)(step + 1 - step0) * (double)(c.steps - step - 1);
            p.accuracy = -1.0f;
            t_prev = t;
            int last = step + 1 == c.steps ||
                       (dp ? xs[1] > 0 : c.time_limit_s > 0 && p.elapsed_s >= c.time_limit_s);
            if (c.eval_n > 0 && ((c.eval_every > 0 && (step + 1) % c.eval_every == 0) || last)) {
                ATTN_TRYG(attn_dates_evaluate(ctx, m, &c, c.eval_n, c.seed, &p.accuracy));
                t_prev = attn__now_s(); /* do not count evaluation as training time */
                if (c.target_accuracy > 0 && p.accuracy >= c.target_accuracy) last = 1;
            }
            if (c.state_path && (!dp || dp->rank == 0) &&
                (last || (c.save_every > 0 && (step + 1) % c.save_every == 0)))
                ATTN_TRYG(save_state(ctx, m, opt, &c, step + 1, c.state_path));
            double stop = progress && progress(user, &p);
            if (dp) ATTN_TRYG(dp->sum(dp->user, ctx, &stop, 1)); /* one rank stops: all do */
            if (stop > 0) break;
            if (last) break;
        }
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    attn_st_free(rs);
    attn_saved_free(sv);
    attn_adamw_free(opt);
    if (st == ATTN_OK) *model = m;
    else attn_module_free(m);
    return st;
}
