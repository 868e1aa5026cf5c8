/* Task lm (attn_lm_train, attn_tasks.h): fine-tuning an attn_llm on token ids, as a task of the
 * one training loop (loop.c). */
#include <math.h>
#include <string.h>

#include "attn_tasks.h"
#include "train_util.h"

attn_lm_train_config attn_lm_train_defaults(void) {
    attn_lm_train_config c;
    memset(&c, 0, sizeof c);
    c.batch = 4, c.len = 128, c.steps = 100, c.warmup = 10;
    c.lr = 1e-4f, c.lr_min = 1e-5f, c.weight_decay = 0.0f, c.clip = 1.0f;
    c.held_out = 0.1, c.eval_every = 50, c.eval_windows = 16, c.seed = 1;
    c.save_every = 50, c.accum = 1;
    return c;
}

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

attn_status attn_lm_train_split(attn_ctx *ctx, const attn_lm_train_config *c, int64_t n,
                                int64_t *ntrain) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!c || !ntrain, ctx, ATTN_E_INVALID, "attn_lm_train_split: NULL argument");
    ATTN_FAIL_IF(!(c->held_out > 0 && c->held_out < 1), ctx, ATTN_E_INVALID,
                 "held_out must be between 0 and 1 (exclusive), got %g", c->held_out);
    ATTN_FAIL_IF(c->len < 1 || c->len > (1 << 24) || n < 0, ctx, ATTN_E_INVALID,
                 "len must be 1..2^24 (got %lld) and the token count >= 0",
                 (long long)c->len);
    int64_t nval = (int64_t)floor((double)n * c->held_out), nt = n - nval;
    ATTN_FAIL_IF(nt < c->len + 1 || nval < c->len + 1, ctx, ATTN_E_INVALID,
                 "%lld tokens are too few for windows of %lld with %g held out: the training "
                 "part (%lld tokens) and the held-out part (%lld) must each hold one window of "
                 "%lld tokens", (long long)n, (long long)c->len, c->held_out, (long long)nt,
                 (long long)nval, (long long)c->len + 1);
    *ntrain = nt;
    return ATTN_OK;
}

typedef struct lm_run {
    const attn_lm_train_config *c;
    attn_llm *llm;
    const int32_t *tok;
    int64_t n, ntrain, V, rows; /* rows: of the last share run */
    int32_t *x, *y;
    float *logits, *dlogits;
} lm_run;

static void fill_window(const lm_run *r, int64_t off, int64_t row) {
    const int64_t T = r->c->len;
    for (int64_t t = 0; t < T; t++) {
        r->x[row * T + t] = r->tok[off + t];
        r->y[row * T + t] = r->tok[off + t + 1];
    }
}

/* The held-out windows (consecutive, from ntrain), `cap` rows at a time. */
static attn_status eval_loss(attn_ctx *ctx, const lm_run *r, int64_t cap, double *loss) {
    const int64_t T = r->c->len, per = T + 1, V = r->V;
    int64_t nw = (r->n - r->ntrain) / per, done = 0;
    if (r->c->eval_windows > 0 && nw > r->c->eval_windows) nw = r->c->eval_windows;
    double sum = 0;
    while (done < nw) {
        int64_t rows = nw - done < cap ? nw - done : cap;
        for (int64_t i = 0; i < rows; i++) fill_window(r, r->ntrain + (done + i) * per, i);
        int64_t l2[2] = {rows * T, V}, ts[1] = {rows * T};
        attn_tensor L2 = attn_tensor_make(r->logits, ATTN_F32, 2, l2);
        attn_tensor Y = attn_tensor_make(r->y, ATTN_I32, 1, ts);
        float l;
        ATTN_TRY(attn_llm_forward(ctx, r->llm, r->x, rows, T, r->logits));
        ATTN_TRY(attn_cross_entropy(ctx, &L2, &Y, -100, 0.0f, &l, NULL));
        sum += (double)l * (double)rows;
        done += rows;
    }
    *loss = nw ? sum / (double)nw : 0.0;
    return ATTN_OK;
}

static attn_status lm_forward(void *user, attn_ctx *ctx, int64_t step, int share, int shares,
                              attn_saved *sv, attn_train_share *out) {
    lm_run *r = user;
    const int64_t B = r->c->batch, T = r->c->len, V = r->V;
    const int64_t Bl = B / shares, r0 = (int64_t)share * Bl;
    const uint64_t span = (uint64_t)(r->ntrain - T); /* window starts: [0, span) */
    for (int64_t i = 0; i < Bl; i++) {
        uint64_t h = mix64(r->c->seed ^ mix64((uint64_t)(step * B + r0 + i)));
        fill_window(r, (int64_t)(h % span), i);
    }
    int64_t l2[2] = {Bl * T, V}, ts[1] = {Bl * T};
    attn_tensor L2 = attn_tensor_make(r->logits, ATTN_F32, 2, l2);
    attn_tensor DL2 = attn_tensor_make(r->dlogits, ATTN_F32, 2, l2);
    attn_tensor Y = attn_tensor_make(r->y, ATTN_I32, 1, ts);
    ATTN_TRY(attn_llm_forward_train(ctx, r->llm, r->x, Bl, T, r->logits, sv));
    ATTN_TRY(attn_cross_entropy(ctx, &L2, &Y, -100, 0.0f, &out->loss, &DL2));
    r->rows = Bl;
    out->count = (double)(Bl * T), out->count_step = (double)(B * T), out->items = (double)(Bl * T);
    return ATTN_OK;
}

static attn_status lm_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    lm_run *r = user;
    if (scale != 1.0f) attn__scale_f(r->dlogits, r->rows * r->c->len * r->V, scale);
    return attn_llm_backward_saved(ctx, r->llm, sv, r->dlogits);
}

static attn_status lm_evaluate(void *user, attn_ctx *ctx, int64_t step, attn_train_progress *p,
                               int *stop) {
    lm_run *r = user;
    double l;
    (void)step, (void)stop;
    ATTN_TRY(eval_loss(ctx, r, r->c->batch, &l));
    p->eval_loss = (float)l;
    return ATTN_OK;
}

static attn_status lm_describe(void *user, attn_ctx *ctx, attn_st_writer *w) {
    lm_run *r = user;
    (void)ctx;
    return r->c->init ? attn_st_writer_meta(w, "init", r->c->init) : ATTN_OK;
}

/* The task's buffers: windows and logits of `batch` rows (evaluation runs that many at once),
 * the loss gradient of one share's. */
static attn_status lm_setup(attn_ctx *ctx, lm_run *r, const attn_lm_train_config *c,
                            attn_llm *llm, const int32_t *tokens, int64_t n, int64_t share_rows) {
    attn_llm_config lc;
    memset(r, 0, sizeof *r);
    r->c = c, r->llm = llm, r->tok = tokens, r->n = n;
    ATTN_FAIL_IF(!llm || !tokens, ctx, ATTN_E_INVALID, "attn_lm_train: llm or tokens is NULL");
    ATTN_FAIL_IF(c->batch < 1 || c->batch > 65536, ctx, ATTN_E_INVALID,
                 "batch must be 1..65536, got %lld", (long long)c->batch);
    ATTN_TRY(attn_lm_train_split(ctx, c, n, &r->ntrain));
    attn_llm_get_info(llm, &lc);
    r->V = lc.vocab_size;
    ATTN_FAIL_IF(c->len > lc.max_position_embeddings, ctx, ATTN_E_INVALID,
                 "len %lld is over the model's context (%lld)", (long long)c->len,
                 (long long)lc.max_position_embeddings);
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(tokens[i] < 0 || tokens[i] >= r->V, ctx, ATTN_E_INVALID,
                     "token %lld is id %d, outside the vocabulary 0..%lld", (long long)i,
                     (int)tokens[i], (long long)r->V - 1);
    int64_t rows = c->batch, T = c->len;
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(rows * T), sizeof *r->x, (void **)&r->x));
    ATTN_TRY(attn__ws_alloc(ctx, (size_t)(rows * T), sizeof *r->y, (void **)&r->y));
    ATTN_TRY(attn__ws_f32(ctx, &r->logits, rows, T, r->V, 1));
    ATTN_TRY(attn__ws_f32(ctx, &r->dlogits, share_rows, T, r->V, 1));
    return ATTN_OK;
}

attn_status attn_lm_evaluate(attn_ctx *ctx, const attn_llm *llm, const attn_lm_train_config *cfg,
                             const int32_t *tokens, int64_t n, double *loss) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!cfg || !loss, ctx, ATTN_E_INVALID, "attn_lm_evaluate: NULL argument");
    lm_run r;
    attn_status st;
    attn__mark mk = attn__ws_mark(ctx);
    ATTN_TRYG(lm_setup(ctx, &r, cfg, (attn_llm *)llm, tokens, n, 1));
    ATTN_TRYG(eval_loss(ctx, &r, cfg->batch, loss));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_lm_train(attn_ctx *ctx, attn_llm *llm, const int32_t *tokens, int64_t n,
                          const attn_lm_train_config *cfg, const attn_st *resume,
                          attn_progress_fn progress, void *user, attn_train_result *result) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "attn_lm_train: cfg is NULL");
    ATTN_TRY(attn__dp_check(ctx, cfg->dp, cfg->accum, cfg->batch, "attn_lm_train"));
    attn_module *m = llm ? attn_llm_module(llm) : NULL;
    ATTN_FAIL_IF(llm && !m, ctx, ATTN_E_INVALID,
                 "attn_lm_train: the model is not trainable (attn_llm_make_trainable)");
    const int64_t shares = (int64_t)(cfg->accum ? cfg->accum : 1) * (cfg->dp ? cfg->dp->nranks : 1);
    lm_run r;
    attn_status st;
    attn__mark mk = attn__ws_mark(ctx);
    ATTN_TRYG(lm_setup(ctx, &r, cfg, llm, tokens, n, cfg->batch / shares));
    {
        attn_train_task task = {"lm", "tokens", m, &r, lm_forward, lm_backward, lm_evaluate,
                                lm_describe, cfg->settings, cfg->nsettings};
        attn_train_options o;
        ATTN__TRAIN_OPTIONS(o, *cfg, NULL, progress, user);
        o.stop_at = cfg->stop_at;
        ATTN_TRYG(attn_train_run(ctx, &task, &o, resume, result));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}
