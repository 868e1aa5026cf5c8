/* `attn train charlm`: a decoder-only Transformer learns a text byte by byte (see "Task:
 * charlm" in attn.h): vocabulary, batches, the training loop, validation bits per character,
 * sampling and checkpoints.  Progress goes to the caller's callback; the library never
 * prints. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../layers/layers.h"
#include "attn_tasks.h"
#include "train_util.h"

#define LN2 0.69314718055994530942

attn_charlm_config attn_charlm_defaults(void) {
    attn_charlm_config c;
    memset(&c, 0, sizeof c);
    c.d_model = 128, c.nhead = 4, c.num_layers = 3, c.dim_feedforward = 512;
    c.dropout = 0.0f;
    c.block_size = 64;
    c.batch = 32, c.steps = 600, c.warmup = 100;
    c.lr = 4e-3f, c.lr_min = 1e-4f, c.weight_decay = 0.01f, c.clip = 1.0f;
    c.seed = 1;
    c.eval_every = 100;
    return c;
}


/* ---- counter-based random numbers (splitmix64's finaliser) ------------------------------ */
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
enum { STREAM_WINDOWS = 1, STREAM_SAMPLE = 2 };
static uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t i) {
    return mix64(mix64(seed ^ mix64(stream)) + i);
}
/* Uniform in [0, 1) with 53 bits. */
static double unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- configuration ------------------------------------------------------------------- */
static attn_status check_vocab(attn_ctx *ctx, const attn_charlm_config *c, int required) {
    ATTN_FAIL_IF(c->vocab_size < 0 || c->vocab_size > 255, ctx, ATTN_E_INVALID,
                 "vocab_size must be in [0, 255], got %d", c->vocab_size);
    ATTN_FAIL_IF(required && c->vocab_size == 0, ctx, ATTN_E_INVALID,
                 "the config has no vocabulary (vocab_size 0)");
    for (int i = 0; i < c->vocab_size; i++) {
        ATTN_FAIL_IF(c->vocab[i] == 0, ctx, ATTN_E_INVALID, "vocab[%d] is the NUL byte", i);
        ATTN_FAIL_IF(i > 0 && c->vocab[i] <= c->vocab[i - 1], ctx, ATTN_E_INVALID,
                     "the vocabulary must be strictly increasing (vocab[%d] = %d after %d)", i,
                     c->vocab[i], c->vocab[i - 1]);
    }
    return ATTN_OK;
}

static attn_status check_model_cfg(attn_ctx *ctx, const attn_charlm_config *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "charlm config is NULL");
    ATTN_FAIL_IF(c->d_model <= 0 || c->d_model > 65536 || c->nhead <= 0 || c->nhead > 4096 ||
                     c->num_layers <= 0 || c->num_layers > 1000 || c->dim_feedforward <= 0 ||
                     c->dim_feedforward > (1 << 24),
                 ctx, ATTN_E_INVALID,
                 "d_model (%lld), nhead (%lld), num_layers (%lld) and dim_feedforward (%lld) "
                 "must be positive and not huge",
                 (long long)c->d_model, (long long)c->nhead, (long long)c->num_layers,
                 (long long)c->dim_feedforward);
    ATTN_FAIL_IF(c->d_model % c->nhead != 0, ctx, ATTN_E_SHAPE,
                 "d_model %lld is not divisible by nhead %lld", (long long)c->d_model,
                 (long long)c->nhead);
    ATTN_FAIL_IF(!(c->dropout >= 0.0f && c->dropout < 1.0f), ctx, ATTN_E_INVALID,
                 "dropout must be in [0, 1)");
    ATTN_FAIL_IF(c->block_size < 1 || c->block_size > (1 << 20), ctx, ATTN_E_INVALID,
                 "block_size must be in [1, %d], got %lld", 1 << 20, (long long)c->block_size);
    return ATTN_OK;
}

static attn_status check_train_cfg(attn_ctx *ctx, const attn_charlm_config *c) {
    ATTN_TRY(check_model_cfg(ctx, c));
    ATTN_TRY(check_vocab(ctx, c, 0));
    ATTN_FAIL_IF(c->batch <= 0 || c->batch > 65536 || c->steps < 0 || c->warmup < 0, ctx,
                 ATTN_E_INVALID, "batch must be in [1, 65536], steps and warmup >= 0");
    ATTN_FAIL_IF(!(c->lr > 0.0f) || !isfinite(c->lr) || !(c->lr_min >= 0.0f) ||
                     !isfinite(c->lr_min) || !(c->clip >= 0.0f) || !(c->weight_decay >= 0.0f) ||
                     !isfinite(c->weight_decay),
                 ctx, ATTN_E_INVALID, "lr must be > 0, lr_min, weight_decay and clip >= 0");
    ATTN_FAIL_IF(!(c->time_limit_s >= 0.0) || c->eval_every < 0 || c->save_every < 0, ctx,
                 ATTN_E_INVALID, "time_limit_s, eval_every and save_every must be >= 0");
    return ATTN_OK;
}

static attn_transformer_config tf_cfg(const attn_charlm_config *c) {
    attn_transformer_config t = attn_transformer_defaults(c->d_model, c->nhead);
    t.dim_feedforward = c->dim_feedforward;
    t.dropout = c->dropout;
    t.activation = ATTN_ACT_GELU;
    t.norm_first = 1;
    t.num_encoder_layers = c->num_layers;
    t.num_decoder_layers = 0;
    return t;
}

/* The model must be a GPT of cfg's sizes. */
static attn_status check_model(attn_ctx *ctx, const attn_module *m, const attn_charlm_config *c) {
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "model is NULL");
    ATTN_FAIL_IF(strcmp(attn_module_kind(m), "gpt") != 0, ctx, ATTN_E_INVALID,
                 "the model is a %s, not a gpt", attn_module_kind(m));
    attn_tensor tok, pos;
    ATTN_TRY(attn_module_param(ctx, m, "tok_emb.weight", &tok));
    ATTN_TRY(attn_module_param(ctx, m, "pos_emb.weight", &pos));
    ATTN_FAIL_IF(tok.shape[0] != c->vocab_size || tok.shape[1] != c->d_model ||
                     pos.shape[0] != c->block_size,
                 ctx, ATTN_E_SHAPE,
                 "the model (vocabulary %lld, d_model %lld, %lld positions) does not match the "
                 "config (vocabulary %d, d_model %lld, block_size %lld)",
                 (long long)tok.shape[0], (long long)tok.shape[1], (long long)pos.shape[0],
                 c->vocab_size, (long long)c->d_model, (long long)c->block_size);
    return ATTN_OK;
}

/* Byte -> token id, -1 outside the vocabulary. */
static void vocab_map(const attn_charlm_config *c, int map[256]) {
    for (int i = 0; i < 256; i++) map[i] = -1;
    for (int i = 0; i < c->vocab_size; i++) map[c->vocab[i]] = i;
}

static void byte_name(int b, char *buf, size_t n) {
    if (b >= 0x20 && b < 0x7f) snprintf(buf, n, "0x%02x '%c'", b, b);
    else snprintf(buf, n, "0x%02x", b);
}

/* Token ids of text into tok (len bytes); every byte must be in the vocabulary. */
static attn_status encode(attn_ctx *ctx, const attn_charlm_config *c, const char *text,
                          size_t len, unsigned char *tok, const char *what) {
    int map[256];
    vocab_map(c, map);
    for (size_t i = 0; i < len; i++) {
        int id = map[(unsigned char)text[i]];
        if (id < 0) {
            char b[24];
            byte_name((unsigned char)text[i], b, sizeof b);
            return attn__fail(ctx, ATTN_E_INVALID, "%s byte %s at offset %zu is not in the "
                              "vocabulary", what, b, i);
        }
        tok[i] = (unsigned char)id;
    }
    return ATTN_OK;
}

static attn_status check_text(attn_ctx *ctx, const char *text, size_t len) {
    ATTN_FAIL_IF(!text, ctx, ATTN_E_INVALID, "text is NULL");
    ATTN_FAIL_IF(len == 0, ctx, ATTN_E_INVALID, "the text is empty");
    const char *nul = memchr(text, 0, len);
    ATTN_FAIL_IF(nul, ctx, ATTN_E_INVALID, "the text has a NUL byte at offset %zu",
                 (size_t)(nul - text));
    return ATTN_OK;
}

/* ---- evaluation ------------------------------------------------------------------------ */
/* Bits per character of the validation split of tok (token ids of the whole text). */
static attn_status eval_bpc(attn_ctx *ctx, const attn_module *m, const attn_charlm_config *c,
                            const unsigned char *tok, size_t len, float *bpc) {
    size_t nval = len / 10, base = len - nval;
    ATTN_FAIL_IF(nval < 2, ctx, ATTN_E_INVALID,
                 "the validation split (the last tenth of %zu bytes) is shorter than 2 bytes", len);
    const int64_t T = c->block_size, V = c->vocab_size;
    const int64_t npred = (int64_t)nval - 1, nfull = npred / T, rem = npred % T;
    const int64_t B = c->batch > 0 ? c->batch : 1;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t *ids, *tgt;
    float *logits;
    double nats = 0.0;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * T), sizeof *ids, (void **)&ids));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * T), sizeof *tgt, (void **)&tgt));
    ATTN_TRYG(attn__ws_f32(ctx, &logits, B, T, V, 1));
    /* full windows, B at a time, then the shorter last one */
    for (int64_t w0 = 0; w0 < nfull || (w0 == nfull && rem > 0);) {
        int64_t nb = w0 < nfull ? (nfull - w0 < B ? nfull - w0 : B) : 1;
        int64_t Tw = w0 < nfull ? T : rem;
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *w = tok + base + (size_t)((w0 + b) * T);
            for (int64_t t = 0; t < Tw; t++) ids[b * Tw + t] = w[t], tgt[b * Tw + t] = w[t + 1];
        }
        int64_t is[2] = {nb, Tw}, ls[3] = {nb, Tw, V}, l2[2] = {nb * Tw, V}, ts[1] = {nb * Tw};
        attn_tensor Ids = attn_tensor_make(ids, ATTN_I64, 2, is);
        attn_tensor Lg = attn_tensor_make(logits, ATTN_F32, 3, ls);
        attn_tensor Lg2 = attn_tensor_make(logits, ATTN_F32, 2, l2);
        attn_tensor Tg = attn_tensor_make(tgt, ATTN_I64, 1, ts);
        float loss;
        ATTN_TRYG(attn_gpt_forward(ctx, m, &Ids, NULL, &Lg));
        ATTN_TRYG(attn_cross_entropy(ctx, &Lg2, &Tg, -100, 0.0f, &loss, NULL));
        nats += (double)loss * (double)(nb * Tw);
        w0 += nb;
    }
    *bpc = (float)(nats / (double)npred / LN2);
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_charlm_evaluate(attn_ctx *ctx, const attn_module *model,
                                 const attn_charlm_config *cfg, const char *text, size_t len,
                                 float *bpc) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !bpc, ctx, ATTN_E_INVALID,
                 "attn_charlm_evaluate: NULL argument");
    ATTN_TRY(check_model_cfg(ctx, cfg));
    ATTN_TRY(check_vocab(ctx, cfg, 1));
    ATTN_TRY(check_model(ctx, model, cfg));
    ATTN_TRY(check_text(ctx, text, len));
    attn__mark mk = attn__ws_mark(ctx);
    unsigned char *tok;
    attn_status st;
    ATTN_TRYG(attn__ws_alloc(ctx, len, 1, (void **)&tok));
    ATTN_TRYG(encode(ctx, cfg, text, len, tok, "text"));
    ATTN_TRYG(eval_bpc(ctx, model, cfg, tok, len, bpc));
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- sampling -------------------------------------------------------------------------- */
/* Index of the next token from logits [V]: greedy for temperature 0 or top_k 1, else a draw
 * with uniform u from the top_k (0 = all) tokens at the temperature.  order [V] is scratch. */
static int pick(const float *logits, int V, float temperature, int top_k, double u, int *order,
                double *p) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature == 0.0f || top_k == 1) return best;
    int k = top_k <= 0 || top_k > V ? V : top_k;
    /* the k most likely, by (logit descending, id ascending): insertion sort */
    for (int i = 0; i < V; i++) {
        int j = i;
        while (j > 0 && logits[order[j - 1]] < logits[i]) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    double mx = logits[order[0]], sum = 0.0;
    for (int i = 0; i < k; i++) sum += p[i] = exp(((double)logits[order[i]] - mx) / temperature);
    double r = u * sum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += p[i];
        if (r < acc) return order[i];
    }
    return order[k - 1];
}

attn_status attn_charlm_generate(attn_ctx *ctx, const attn_module *model,
                                 const attn_charlm_config *cfg, const char *prompt,
                                 int64_t n_chars, float temperature, int top_k, uint64_t seed,
                                 char *out, size_t cap) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !out, ctx, ATTN_E_INVALID,
                 "attn_charlm_generate: NULL argument");
    ATTN_FAIL_IF(n_chars < 0 || (uint64_t)n_chars >= (uint64_t)cap, ctx, ATTN_E_INVALID,
                 "n_chars (%lld) must be >= 0 and less than the output capacity (%zu)",
                 (long long)n_chars, cap);
    ATTN_FAIL_IF(!(temperature >= 0.0f) || !isfinite(temperature), ctx, ATTN_E_INVALID,
                 "temperature must be >= 0 and finite, got %g", (double)temperature);
    ATTN_FAIL_IF(top_k < 0, ctx, ATTN_E_INVALID, "top_k must be >= 0 (0 = all), got %d", top_k);
    ATTN_TRY(check_model_cfg(ctx, cfg));
    ATTN_TRY(check_vocab(ctx, cfg, 1));
    ATTN_TRY(check_model(ctx, model, cfg));
    const int64_t T = cfg->block_size;
    const int V = cfg->vocab_size;
    int map[256];
    vocab_map(cfg, map);
    size_t plen = prompt ? strlen(prompt) : 0;
    /* seq holds the ids seen; when full, its last T - 1 move to the front */
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    int64_t *seq;
    float *logits;
    int *order;
    double *p;
    size_t keep = plen > (size_t)T ? (size_t)T : plen, n0 = keep ? keep : 1;
    size_t seq_cap = (uint64_t)n_chars < 2 * (uint64_t)T ? n0 + (size_t)n_chars : 2 * (size_t)T;
    ATTN_TRYG(attn__ws_alloc(ctx, seq_cap, sizeof *seq, (void **)&seq));
    ATTN_TRYG(attn__ws_f32(ctx, &logits, T, V, 1, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)V, sizeof *order, (void **)&order));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)V, sizeof *p, (void **)&p));
    for (size_t i = 0; i < plen; i++) {
        int id = map[(unsigned char)prompt[i]];
        if (id < 0) {
            char b[24];
            byte_name((unsigned char)prompt[i], b, sizeof b);
            st = attn__fail(ctx, ATTN_E_INVALID, "prompt byte %s at offset %zu is not in the "
                            "model's vocabulary", b, i);
            goto done;
        }
        if (i >= plen - keep) seq[i - (plen - keep)] = id;
    }
    if (!keep) seq[0] = map['\n'] >= 0 ? map['\n'] : 0;
    size_t n = n0;
    for (int64_t k = 0; k < n_chars; k++) {
        int64_t Tc = (int64_t)n < T ? (int64_t)n : T;
        int64_t is[2] = {1, Tc}, ls[3] = {1, Tc, V};
        attn_tensor Ids = attn_tensor_make(seq + n - (size_t)Tc, ATTN_I64, 2, is);
        attn_tensor Lg = attn_tensor_make(logits, ATTN_F32, 3, ls);
        ATTN_TRYG(attn_gpt_forward(ctx, model, &Ids, NULL, &Lg));
        double u = unit(hash3(seed, STREAM_SAMPLE, (uint64_t)k));
        int id = pick(logits + (Tc - 1) * V, V, temperature, top_k, u, order, p);
        if (n == seq_cap) {
            memmove(seq, seq + n - (size_t)(T - 1), (size_t)(T - 1) * sizeof *seq);
            n = (size_t)(T - 1);
        }
        seq[n++] = id;
        out[k] = (char)cfg->vocab[id];
    }
    out[n_chars] = '\0';
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- checkpoints ----------------------------------------------------------------------- */

static attn_status put_cfg(attn_st_writer *w, const attn_charlm_config *c) {
    char hex[2 * 255 + 1];
    for (int i = 0; i < c->vocab_size; i++) snprintf(hex + 2 * i, 3, "%02x", c->vocab[i]);
    hex[2 * c->vocab_size] = '\0';
    ATTN_TRY(attn_st_writer_meta(w, "task", "charlm"));
    ATTN_TRY(attn_st_writer_meta(w, "model", "gpt"));
    ATTN_TRY(attn__meta_put_i(w, "d_model", c->d_model));
    ATTN_TRY(attn__meta_put_i(w, "nhead", c->nhead));
    ATTN_TRY(attn__meta_put_i(w, "num_layers", c->num_layers));
    ATTN_TRY(attn__meta_put_i(w, "dim_feedforward", c->dim_feedforward));
    ATTN_TRY(attn__meta_put_f(w, "dropout", c->dropout));
    ATTN_TRY(attn_st_writer_meta(w, "activation", "gelu"));
    ATTN_TRY(attn_st_writer_meta(w, "norm_first", "true"));
    ATTN_TRY(attn__meta_put_f(w, "layer_norm_eps", 1e-5));
    ATTN_TRY(attn__meta_put_i(w, "block_size", c->block_size));
    ATTN_TRY(attn__meta_put_i(w, "max_positions", c->block_size));
    ATTN_TRY(attn__meta_put_i(w, "vocab_size", c->vocab_size));
    ATTN_TRY(attn_st_writer_meta(w, "vocab", hex));
    return ATTN_OK;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static attn_status read_cfg(attn_ctx *ctx, const attn_st *st, attn_charlm_config *c) {
    const char *task = attn_st_meta(st, "task");
    ATTN_FAIL_IF(!task || strcmp(task, "charlm") != 0, ctx, ATTN_E_FORMAT,
                 "not a charlm checkpoint (metadata task = %s)", task ? task : "(none)");
    *c = attn_charlm_defaults();
    int64_t v = 0;
    ATTN_TRY(attn__meta_get_i(ctx, st, "d_model", &c->d_model));
    ATTN_TRY(attn__meta_get_i(ctx, st, "nhead", &c->nhead));
    ATTN_TRY(attn__meta_get_i(ctx, st, "num_layers", &c->num_layers));
    ATTN_TRY(attn__meta_get_i(ctx, st, "dim_feedforward", &c->dim_feedforward));
    ATTN_TRY(attn__meta_get_f(ctx, st, "dropout", &c->dropout));
    ATTN_TRY(attn__meta_get_i(ctx, st, "block_size", &c->block_size));
    ATTN_TRY(attn__meta_get_i(ctx, st, "vocab_size", &v));
    ATTN_FAIL_IF(v < 1 || v > 255, ctx, ATTN_E_FORMAT,
                 "checkpoint vocab_size %lld is not in [1, 255]", (long long)v);
    c->vocab_size = (int)v;
    const char *hex = attn_st_meta(st, "vocab");
    ATTN_FAIL_IF(!hex || strlen(hex) != 2 * (size_t)v, ctx, ATTN_E_FORMAT,
                 "checkpoint metadata \"vocab\" must hold %lld hex byte pairs", (long long)v);
    for (int i = 0; i < c->vocab_size; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        ATTN_FAIL_IF(hi < 0 || lo < 0, ctx, ATTN_E_FORMAT,
                     "checkpoint metadata \"vocab\" is not hexadecimal");
        c->vocab[i] = (unsigned char)(hi * 16 + lo);
    }
    attn_status s = check_model_cfg(ctx, c);
    if (s == ATTN_OK) s = check_vocab(ctx, c, 1);
    if (s != ATTN_OK)
        return attn__fail(ctx, ATTN_E_FORMAT, "checkpoint config: %s", attn_ctx_errmsg(ctx));
    return ATTN_OK;
}

attn_status attn_charlm_save(attn_ctx *ctx, const attn_module *model,
                             const attn_charlm_config *cfg, const char *path) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model || !cfg || !path, ctx, ATTN_E_INVALID, "attn_charlm_save: NULL argument");
    ATTN_TRY(check_model_cfg(ctx, cfg));
    ATTN_TRY(check_vocab(ctx, cfg, 1));
    ATTN_TRY(check_model(ctx, model, cfg));
    attn_st_writer *w;
    ATTN_TRY(attn_st_writer_create(ctx, &w));
    attn_status st = put_cfg(w, cfg);
    if (st == ATTN_OK) st = attn_module_save(ctx, model, w, NULL);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

/* src: the checkpoint the parameters will come from (then each must be there under prefix
 * with its shape as it is registered), or NULL for a fresh model. */
static attn_status create_model(attn_ctx *ctx, const attn_charlm_config *c, const attn_st *src,
                                const char *prefix, attn_module **m) {
    attn_transformer_config t = tf_cfg(c);
    attn__param_source(ctx, src, prefix);
    attn_status s = attn_gpt_create(ctx, &t, c->vocab_size, c->block_size, m);
    attn__param_source(ctx, NULL, NULL);
    return s;
}

attn_status attn_charlm_load(attn_ctx *ctx, const char *path, attn_charlm_config *cfg,
                             attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !cfg || !model, ctx, ATTN_E_INVALID, "attn_charlm_load: NULL argument");
    *model = NULL;
    attn_st *st;
    ATTN_TRY(attn_st_read_file(ctx, path, &st));
    attn_status s = read_cfg(ctx, st, cfg);
    /* a training state keeps the parameters under "model." */
    const char *prefix = attn_st_meta(st, "train_step") ? "model." : NULL;
    if (s == ATTN_OK) s = create_model(ctx, cfg, st, prefix, model);
    if (s == ATTN_OK) {
        s = attn_module_load(ctx, *model, st, prefix, 1);
        if (s != ATTN_OK) {
            attn_module_free(*model);
            *model = NULL;
        }
    }
    attn_st_free(st);
    return s;
}

/* The settings a resumed run must share with the run it continues (attn_train_setting):
 * stored in checkpoints as train.KEY, checked before the model is built from one.  The text and
 * the vocabulary by their FNV-1a hashes. */
enum { CHARLM_SETTINGS = 19 };
static int charlm_settings(const attn_charlm_config *c, const char *text, size_t len,
                           const attn_st *resume, attn_train_setting *s) {
    char b[24];
    int n = 0;
    ATTN__SETTINGS_MODEL(s, n, c);
    attn_train_setting_i(&s[n++], "train.block", "--block", c->block_size);
    attn_train_setting_i(&s[n++], "train.vocab_size", "the vocabulary", c->vocab_size);
    snprintf(b, sizeof b, "%016llx",
             (unsigned long long)fnv1a((const char *)c->vocab, (size_t)c->vocab_size));
    attn_train_setting_s(&s[n++], "train.vocab_fnv1a64", "the vocabulary", b);
    ATTN__SETTINGS_TRAIN(s, n, c);
    attn_train_setting_i(&s[n++], "train.text_bytes", "--text (its length)", (long long)len);
    snprintf(b, sizeof b, "%016llx", (unsigned long long)fnv1a(text, len));
    attn_train_setting_s(&s[n++], "train.text_fnv1a64", "--text (its contents)", b);
    return attn__setting_dtype(s, n, c->dtype, resume);
}

/* ---- training: a task of attn_train_run ------------------------------------------------ */
typedef struct charlm_run {
    attn_charlm_config c;
    const char *text;
    size_t len;
    const unsigned char *tok;
    uint64_t span;   /* window starts: [0, span) */
    attn_module *m;
    int64_t *ids, *tgt;
    float *logits, *dlogits;
    int64_t rows;    /* the rows of the last share run */
} charlm_run;

/* Share `share` of `shares` takes rows [share B/shares, (share + 1) B/shares) of each global
 * batch of B windows. */
static attn_status charlm_forward(void *user, attn_ctx *ctx, int64_t step, int share,
                                  int shares, attn_saved *sv, attn_train_share *out) {
    charlm_run *r = user;
    const attn_charlm_config *c = &r->c;
    const int64_t B = c->batch, T = c->block_size, V = c->vocab_size;
    const int64_t Bl = B / shares, r0 = (int64_t)share * Bl;
    for (int64_t b = 0; b < Bl; b++) {
        uint64_t off = hash3(c->seed, STREAM_WINDOWS, (uint64_t)(step * B + r0 + b)) % r->span;
        const unsigned char *w = r->tok + off;
        for (int64_t t = 0; t < T; t++) r->ids[b * T + t] = w[t], r->tgt[b * T + t] = w[t + 1];
    }
    int64_t is[2] = {Bl, T}, ls[3] = {Bl, T, V}, l2[2] = {Bl * T, V}, ts[1] = {Bl * T};
    attn_tensor Ids = attn_tensor_make(r->ids, ATTN_I64, 2, is);
    attn_tensor Lg = attn_tensor_make(r->logits, ATTN_F32, 3, ls);
    attn_tensor Lg2 = attn_tensor_make(r->logits, ATTN_F32, 2, l2);
    attn_tensor DLg2 = attn_tensor_make(r->dlogits, ATTN_F32, 2, l2);
    attn_tensor Tg = attn_tensor_make(r->tgt, ATTN_I64, 1, ts);
    /* each step has its own block of dropout offsets; a share draws its rows' masks */
    attn_run run = {c->dropout > 0.0f, c->seed, (uint64_t)step << 16, r0};
    ATTN_TRY(attn_gpt_forward_train(ctx, r->m, &Ids, &run, &Lg, sv));
    ATTN_TRY(attn_cross_entropy(ctx, &Lg2, &Tg, -100, 0.0f, &out->loss, &DLg2));
    r->rows = Bl;
    out->count = (double)(Bl * T), out->count_step = (double)(B * T);
    out->items = (double)(Bl * T);
    return ATTN_OK;
}

static attn_status charlm_backward(void *user, attn_ctx *ctx, attn_saved *sv, float scale) {
    charlm_run *r = user;
    int64_t ls[3] = {r->rows, r->c.block_size, r->c.vocab_size};
    if (scale != 1.0f) attn__scale_f(r->dlogits, ls[0] * ls[1] * ls[2], scale);
    attn_tensor DLg = attn_tensor_make(r->dlogits, ATTN_F32, 3, ls);
    return attn_gpt_backward_saved(ctx, r->m, sv, &DLg);
}

static attn_status charlm_evaluate(void *user, attn_ctx *ctx, int64_t step,
                                   attn_train_progress *p, int *stop) {
    charlm_run *r = user;
    (void)step, (void)stop;
    return eval_bpc(ctx, r->m, &r->c, r->tok, r->len, &p->val_bpc);
}

static attn_status charlm_describe(void *user, attn_ctx *ctx, attn_st_writer *w) {
    charlm_run *r = user;
    (void)ctx;
    return put_cfg(w, &r->c);
}

attn_status attn_charlm_train(attn_ctx *ctx, attn_charlm_config *cfg, const char *text,
                              size_t len, const char *resume_path, attn_progress_fn progress,
                              void *user, attn_module **model) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!model, ctx, ATTN_E_INVALID, "attn_charlm_train: model is NULL");
    *model = NULL;
    ATTN_TRY(check_train_cfg(ctx, cfg));
    ATTN_TRY(attn__dp_check(ctx, cfg->dp, cfg->accum, cfg->batch, "attn_charlm_train"));
    ATTN_TRY(check_text(ctx, text, len));
    charlm_run r;
    memset(&r, 0, sizeof r);
    r.c = *cfg, r.text = text, r.len = len;
    attn_charlm_config *c = &r.c;
    size_t nval = len / 10, ntrain = len - nval;
    ATTN_FAIL_IF(ntrain < (size_t)c->block_size + 1, ctx, ATTN_E_INVALID,
                 "the training split (%zu of %zu bytes) must hold block_size + 1 = %lld bytes",
                 ntrain, len, (long long)c->block_size + 1);
    ATTN_FAIL_IF(nval < 2, ctx, ATTN_E_INVALID,
                 "the validation split (the last tenth of %zu bytes) is shorter than 2 bytes", len);
    if (c->vocab_size == 0) {
        int seen[256] = {0};
        for (size_t i = 0; i < len; i++) seen[(unsigned char)text[i]] = 1;
        for (int b = 1; b < 256; b++)
            if (seen[b]) c->vocab[c->vocab_size++] = (unsigned char)b;
    }
    r.span = (uint64_t)(ntrain - (size_t)c->block_size);
    attn_st *rs = NULL;
    attn_status st;
    attn__mark mk = attn__ws_mark(ctx);
    unsigned char *tok;
    ATTN_TRYG(attn__ws_alloc(ctx, len, 1, (void **)&tok));
    ATTN_TRYG(encode(ctx, c, text, len, tok, "text"));
    r.tok = tok;
    attn_train_setting set[CHARLM_SETTINGS];
    int nset = charlm_settings(c, text, len, NULL, set);
    if (resume_path) { /* checked before the model is built: it is built from the file */
        attn_charlm_config saved;
        ATTN_TRYG(attn_st_read_file(ctx, resume_path, &rs));
        ATTN_TRYG(read_cfg(ctx, rs, &saved));
        nset = charlm_settings(c, text, len, rs, set);
        ATTN_TRYG(attn_train_check_settings(ctx, rs, resume_path, set, nset));
    }
    ATTN_TRYG(create_model(ctx, c, rs, "model.", &r.m));
    ATTN_TRYG(attn_module_init(ctx, r.m, c->seed));
    {
        const int64_t T = c->block_size, V = c->vocab_size;
        const int64_t Bl = c->batch / ((c->dp ? c->dp->nranks : 1) * (c->accum ? c->accum : 1));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(Bl * T), sizeof *r.ids, (void **)&r.ids));
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(Bl * T), sizeof *r.tgt, (void **)&r.tgt));
        ATTN_TRYG(attn__ws_f32(ctx, &r.logits, Bl, T, V, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &r.dlogits, Bl, T, V, 1));
    }
    {
        attn_train_task task = {"charlm", "tokens", r.m, &r, charlm_forward, charlm_backward,
                                charlm_evaluate, charlm_describe, set, nset};
        attn_train_options o;
        ATTN__TRAIN_OPTIONS(o, *c, resume_path, progress, user);
        ATTN_TRYG(attn_train_run(ctx, &task, &o, rs, NULL));
    }
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    attn_st_free(rs);
    if (st == ATTN_OK) {
        *model = r.m;
        cfg->vocab_size = c->vocab_size;
        memcpy(cfg->vocab, c->vocab, sizeof c->vocab);
    } else {
        attn_module_free(r.m);
    }
    return st;
}
