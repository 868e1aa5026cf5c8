/* The GGUF loader of attn_llm (llm_model.h's steps): llama.cpp's model files of the llama
 * architecture.  The config comes from the llama.* keys, the weights stay in the file's mapping
 * in their own types (quantized blocks are read in place by the quantized kernels), norms as
 * F32; q_proj and k_proj keep the row order GGUF converters give them (permuted within each
 * head for GGML's rope), which the layers run with the interleaved rope (attn__rope_rows).
 * ATTN_LLM_LOAD_F32 dequantizes every weight to F32 instead (the exactness reference).
 * Contract: attn.h, attn_llm_load_gguf. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "../io/json.h"
#include "../text/bpe.h"
#include "../kernels/quant.h"
#include "llm_model.h"

/* What the model's store holds: the mapped file and the F32 arena of converted tensors. */
typedef struct gguf_store {
    attn_gguf *g;
    void *arena;
    attn_free_fn free;
    void *alloc_user;
} gguf_store;

static void store_free(void *user, void *store) {
    (void)user;
    gguf_store *s = store;
    attn_gguf_free(s->g);
    if (s->arena) s->free(s->alloc_user, s->arena);
    s->free(s->alloc_user, s);
}

/* An integer key of the architecture ("llama.block_count"); def < 0: required. */
static attn_status key_int(attn_ctx *ctx, const attn_gguf *g, const char *arch,
                           const char *key, int64_t def, int64_t *v, const char *path) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    attn_status st = attn_gguf_get_int(g, k, 0, INT64_MAX, v);
    if (st == ATTN_E_NOT_FOUND && def >= 0) {
        *v = def;
        return ATTN_OK;
    }
    if (st == ATTN_E_NOT_FOUND)
        return attn__fail(ctx, ATTN_E_FORMAT, "%.300s: the key %s is missing", path, k);
    return st;
}

static attn_status key_float(attn_ctx *ctx, const attn_gguf *g, const char *arch,
                             const char *key, double def, double *v, const char *path) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    attn_status st = attn_gguf_get_float(g, k, v);
    if (st == ATTN_E_NOT_FOUND && !isnan(def)) {
        *v = def;
        return ATTN_OK;
    }
    if (st == ATTN_E_NOT_FOUND)
        return attn__fail(ctx, ATTN_E_FORMAT, "%.300s: the key %s is missing", path, k);
    return st;
}

/* The families a GGUF file may hold: general.architecture (also its keys' prefix) and what it
 * sets beyond Llama's block.  llama (also Mistral's files: llama.cpp's converter writes them as
 * llama and drops Mistral's window) permutes q/k rows for GGML's rope; the others keep HF's
 * NeoX rotation (rope_interleaved 0).  Qwen2's q/k/v biases and every family's other optional
 * tensors are found by name.  Gemma 3: llama.cpp's converter stores its norms as 1 + w (HF's
 * Gemma3RMSNorm), so they are plain RMSNorm weights here; every 6th layer is global, the others
 * see the sliding window with their own RoPE base (rope.freq_base_swa, else 10^4), as llama.cpp
 * and transformers' Gemma3TextConfig fix them. */
typedef struct family {
    const char *arch;
    int rope_interleaved, qk_norm, sandwich_norm, mlp_act, embed_scale, swa;
    int64_t sliding_period;
    double rope_theta_local;
} family;
static const family families[] = {
    {"llama", 1, 0, 0, 0, 0, 0, 0, 0.0},
    {"qwen2", 0, 0, 0, 0, 0, 0, 0, 0.0},
    {"qwen3", 0, 1, 0, 0, 0, 0, 0, 0.0},
    {"gemma3", 0, 1, 1, 1, 1, 1, 6, 10000.0},
};

static attn_status config(attn_ctx *ctx, const attn_gguf *g, const char *path,
                          attn_llm_config *c, int *rope_interleaved) {
    const char *a;
    size_t alen;
    attn_status st = attn_gguf_get_str(g, "general.architecture", &a, &alen);
    ATTN_FAIL_IF(st == ATTN_E_NOT_FOUND, ctx, ATTN_E_FORMAT,
                 "%.300s: general.architecture is missing", path);
    ATTN_TRY(st);
    const family *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (alen == strlen(families[i].arch) && !memcmp(a, families[i].arch, alen))
            fam = &families[i];
    ATTN_FAIL_IF(!fam, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: architecture \"%.*s\" is not supported (attn runs \"llama\", "
                 "\"qwen2\", \"qwen3\" and \"gemma3\")", path, (int)(alen > 60 ? 60 : alen), a);
    const char *arch = fam->arch;
    memset(c, 0, sizeof *c);
    *rope_interleaved = fam->rope_interleaved;
    c->qk_norm = fam->qk_norm, c->sandwich_norm = fam->sandwich_norm, c->mlp_act = fam->mlp_act;
    c->sliding_period = fam->sliding_period, c->rope_theta_local = fam->rope_theta_local;
    int64_t rope_dim, experts, kl, vl;
    ATTN_TRY(key_int(ctx, g, arch, "block_count", -1, &c->num_layers, path));
    ATTN_TRY(key_int(ctx, g, arch, "embedding_length", -1, &c->hidden_size, path));
    ATTN_TRY(key_int(ctx, g, arch, "feed_forward_length", -1, &c->intermediate_size, path));
    ATTN_TRY(key_int(ctx, g, arch, "attention.head_count", -1, &c->num_heads, path));
    ATTN_TRY(key_int(ctx, g, arch, "attention.head_count_kv", c->num_heads, &c->num_kv_heads,
                     path));
    ATTN_TRY(key_int(ctx, g, arch, "context_length", -1, &c->max_position_embeddings, path));
    ATTN_FAIL_IF(c->num_heads < 1 || c->hidden_size < 1, ctx, ATTN_E_INVALID,
                 "%.300s: %s.attention.head_count and %s.embedding_length must be positive",
                 path, arch, arch);
    ATTN_TRY(key_int(ctx, g, arch, "attention.key_length", c->hidden_size / c->num_heads, &kl,
                     path));
    ATTN_TRY(key_int(ctx, g, arch, "attention.value_length", kl, &vl, path));
    ATTN_FAIL_IF(kl != vl, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: key_length %lld differs from value_length %lld", path, (long long)kl,
                 (long long)vl);
    c->head_dim = kl;
    ATTN_TRY(key_int(ctx, g, arch, "rope.dimension_count", kl, &rope_dim, path));
    ATTN_FAIL_IF(rope_dim != kl, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: rope.dimension_count %lld is not the head size %lld (partial rotary "
                 "embeddings are not supported)", path, (long long)rope_dim, (long long)kl);
    ATTN_TRY(key_int(ctx, g, arch, "expert_count", 0, &experts, path));
    ATTN_FAIL_IF(experts > 0, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: mixture-of-experts models (%lld experts) are not supported", path,
                 (long long)experts);
    const char *rs;
    size_t rslen;
    char rkey[64];
    snprintf(rkey, sizeof rkey, "%s.rope.scaling.type", arch);
    st = attn_gguf_get_str(g, rkey, &rs, &rslen);
    if (st == ATTN_OK && rslen == 6 && !memcmp(rs, "linear", 6)) {
        c->rope_scaling = 1;
        ATTN_TRY(key_float(ctx, g, arch, "rope.scaling.factor", NAN, &c->rope_factor, path));
    } else if (st == ATTN_OK && !(rslen == 4 && !memcmp(rs, "none", 4))) {
        return attn__fail(ctx, ATTN_E_UNSUPPORTED, "%.300s: rope scaling \"%.*s\" is not "
                          "supported (attn has linear, and llama3's factors as "
                          "rope_freqs.weight)", path, (int)(rslen > 40 ? 40 : rslen), rs);
    }
    if (st != ATTN_OK && st != ATTN_E_NOT_FOUND) return st;
    attn_gguf_tensor tf;
    if (attn_gguf_tensor_find(g, "rope_freqs.weight", &tf) == ATTN_OK) {
        ATTN_FAIL_IF(c->rope_scaling, ctx, ATTN_E_UNSUPPORTED, "%.300s: both rope.scaling.type "
                     "and rope_freqs.weight", path);
        c->rope_scaling = 3;
    }
    ATTN_TRY(key_float(ctx, g, arch, "rope.freq_base", 10000.0, &c->rope_theta, path));
    ATTN_TRY(key_float(ctx, g, arch, "attention.layer_norm_rms_epsilon", NAN, &c->rms_norm_eps,
                       path));
    if (fam->swa) {
        ATTN_TRY(key_int(ctx, g, arch, "attention.sliding_window", 0, &c->sliding_window, path));
        ATTN_TRY(key_float(ctx, g, arch, "rope.freq_base_swa", fam->rope_theta_local,
                           &c->rope_theta_local, path));
    }
    if (!c->sliding_window) c->sliding_period = 0, c->rope_theta_local = 0;
    if (fam->embed_scale) c->embed_scale = sqrt((double)c->hidden_size);
    /* the vocabulary: the key, else the embedding's rows */
    attn_gguf_tensor te;
    st = attn_gguf_tensor_find(g, "token_embd.weight", &te);
    ATTN_FAIL_IF(st == ATTN_E_NOT_FOUND, ctx, ATTN_E_NOT_FOUND,
                 "%.300s: tensor token_embd.weight is missing", path);
    ATTN_TRY(st);
    ATTN_TRY(key_int(ctx, g, arch, "vocab_size", te.n_dims == 2 ? te.shape[0] : 0,
                     &c->vocab_size, path));
    attn_gguf_tensor to;
    c->tie_word_embeddings = attn_gguf_tensor_find(g, "output.weight", &to) == ATTN_E_NOT_FOUND;
    c->attention_bias = attn_gguf_tensor_find(g, "blk.0.attn_q.bias", &to) == ATTN_OK;
    if (c->attention_bias && attn_gguf_tensor_find(g, "blk.0.attn_output.bias", &to) != ATTN_OK)
        c->attention_bias = 2; /* Qwen2: q/k/v only */
    c->mlp_bias = attn_gguf_tensor_find(g, "blk.0.ffn_up.bias", &to) == ATTN_OK;
    return ATTN_OK;
}

/* GGUF's names of the per-layer tensors, in the order of llm_model.h's ATTN__LT_*. */
static const char *const lt_name[ATTN__LT_N] = {
    "attn_q.weight",    "attn_k.weight",  "attn_v.weight",   "attn_output.weight",
    "ffn_gate.weight",  "ffn_up.weight",  "ffn_down.weight", "attn_norm.weight",
    "ffn_norm.weight",  "attn_q.bias",    "attn_k.bias",     "attn_v.bias",
    "attn_output.bias", "ffn_gate.bias",  "ffn_up.bias",     "ffn_down.bias",
    "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
    "post_ffw_norm.weight"};

/* Entry i (attn__llm_entry): 0 when absent, else its GGUF name and shape. */
static int entry(const attn_llm_config *c, int64_t i, char *name, size_t n, int64_t *rows,
                 int64_t *cols) {
    int64_t layer;
    int kind;
    if (!attn__llm_entry(c, i, &layer, &kind, rows, cols)) return 0;
    if (layer < 0)
        snprintf(name, n, "%s", kind == 0 ? "token_embd.weight"
                                : kind == 1 ? "output_norm.weight"
                                            : "output.weight");
    else
        snprintf(name, n, "blk.%lld.%s", (long long)layer, lt_name[kind]);
    return 1;
}

/* Whether entry i is kept in its own type (a matrix the kernels read) or converted to F32. */
static int keeps_type(int64_t i, int64_t cols, int type, unsigned flags) {
    (void)i;
    return cols > 0 && type != ATTN_Q_F32 && !(flags & ATTN_LLM_LOAD_F32);
}

/* Every tensor with its shape; the bytes of the F32 copies. */
static attn_status match(attn_ctx *ctx, const attn_gguf *g, const attn_llm_config *c,
                         unsigned flags, const char *path, size_t *bytes) {
    size_t total = 0;
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        char name[96];
        int64_t rows, cols;
        if (!entry(c, i, name, sizeof name, &rows, &cols)) continue;
        attn_gguf_tensor t;
        attn_status st = attn_gguf_tensor_find(g, name, &t);
        ATTN_FAIL_IF(st == ATTN_E_NOT_FOUND, ctx, ATTN_E_NOT_FOUND,
                     "%.300s: tensor %s is missing", path, name);
        ATTN_TRY(st);
        const int nd = cols ? 2 : 1;
        ATTN_FAIL_IF(t.n_dims != nd || t.shape[0] != rows || (nd == 2 && t.shape[1] != cols),
                     ctx, ATTN_E_SHAPE,
                     "%.300s: tensor %s has shape [%lld%s%lld] (row-major), the config asks for "
                     "[%lld%s%lld]", path, name, (long long)t.shape[0], t.n_dims > 1 ? ", " : "",
                     t.n_dims > 1 ? (long long)t.shape[1] : 0LL, (long long)rows,
                     nd > 1 ? ", " : "", nd > 1 ? (long long)cols : 0LL);
        if (keeps_type(i, cols, t.type, flags) ||
            (t.type == ATTN_Q_F32 && !((uintptr_t)t.data & 3)))
            continue; /* read in place */
        size_t b;
        ATTN_FAIL_IF(!attn__mul_size((size_t)t.numel, sizeof(float), &b) ||
                         !attn__add_size(b, 63, &b) || !attn__add_size(total, b / 64 * 64, &total),
                     ctx, ATTN_E_OVERFLOW, "%.300s: the weights overflow the address space",
                     path);
    }
    *bytes = total;
    return ATTN_OK;
}

static attn_status fill(attn_ctx *ctx, attn_llm *m, gguf_store *s, unsigned flags,
                        size_t bytes, int interleaved, const char *path) {
    if (bytes) {
        s->arena = attn__malloc(ctx, bytes);
        ATTN_FAIL_IF(!s->arena, ctx, ATTN_E_NOMEM, "out of memory (%zu bytes of F32 weights)",
                     bytes);
    }
    const int check = !(ctx->flags & ATTN_CTX_NO_FINITE_CHECK);
    size_t off = 0;
    for (int64_t i = 0; i < attn__llm_entry_count(&m->cfg); i++) {
        char name[96];
        int64_t rows, cols;
        if (!entry(&m->cfg, i, name, sizeof name, &rows, &cols)) continue;
        attn_gguf_tensor t;
        ATTN_TRY(attn_gguf_tensor_find(s->g, name, &t));
        if (keeps_type(i, cols, t.type, flags)) {
            /* used in place, never dequantized: its scales checked here (round-3 F4: one NaN
             * d gave finite, wrong output) */
            int64_t be = 1, bb = 4;
            attn_qtype_block(t.type, &be, &bb);
            const char *field = "d";
            const int64_t bad = check ? attn__quant_first_nonfinite(t.type, t.data,
                                                                    t.numel / be, &field)
                                      : -1;
            ATTN_FAIL_IF(bad >= 0, ctx, ATTN_E_NONFINITE,
                         "%.300s: tensor %s (%s): block %lld has a non-finite %s (elements "
                         "%lld..%lld)", path, name, attn_qtype_name(t.type), (long long)bad,
                         field, (long long)(bad * be), (long long)(bad * be + be - 1));
            attn__llm_bind(m, i, t.type, t.data, interleaved);
            continue;
        }
        const float *p = t.data;
        if (t.type != ATTN_Q_F32 || ((uintptr_t)t.data & 3)) {
            float *d = (float *)((unsigned char *)s->arena + off);
            off += ((size_t)t.numel * sizeof(float) + 63) / 64 * 64;
            attn_status st = attn_dequantize(ctx, t.type, t.data, t.nbytes, t.numel, d);
            if (st != ATTN_OK)
                return attn__fail(ctx, st, "%.300s: tensor %s: %s", path, name,
                                  attn_ctx_errmsg(ctx));
            p = d;
        }
        for (int64_t j = 0; check && j < t.numel; j++)
            ATTN_FAIL_IF(!isfinite(p[j]), ctx, ATTN_E_NONFINITE,
                         "%.300s: tensor %s holds %g at element %lld", path, name, (double)p[j],
                         (long long)j);
        attn__llm_bind(m, i, ATTN_Q_F32, p, interleaved);
    }
    return ATTN_OK;
}

/* rope_freqs.weight (rope_scaling 3): head_dim / 2 positive finite divisors into div. */
static attn_status rope_freqs(attn_ctx *ctx, const attn_gguf *g, const attn_llm_config *c,
                              float *div, const char *path) {
    attn_gguf_tensor t;
    ATTN_TRY(attn_gguf_tensor_find(g, "rope_freqs.weight", &t));
    const int64_t n = c->head_dim / 2;
    ATTN_FAIL_IF(t.n_dims != 1 || t.shape[0] != n, ctx, ATTN_E_SHAPE, "%.300s: rope_freqs.weight "
                 "must be a vector of head_dim / 2 = %lld factors", path, (long long)n);
    attn_status st = attn_dequantize(ctx, t.type, t.data, t.nbytes, n, div);
    if (st) return attn__fail(ctx, st, "%.300s: rope_freqs.weight: %s", path,
                              attn_ctx_errmsg(ctx));
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(!(div[i] > 0) || !isfinite(div[i]), ctx, ATTN_E_NONFINITE,
                     "%.300s: rope_freqs.weight holds %g at element %lld (factors are positive "
                     "and finite)", path, (double)div[i], (long long)i);
    return ATTN_OK;
}

/* The strings of an ARRAY key as NUL-terminated copies: *ptrs [n] into one text buffer
 * (*text), both allocated here (bounded by the file: the strings' bytes plus n). */
static attn_status str_array(attn_ctx *ctx, const attn_gguf *g, const char *key,
                             const char *path, char ***ptrs, char **text, uint64_t *count) {
    int et;
    uint64_t n;
    attn_status st = attn_gguf_get_arr(g, key, &et, &n, NULL);
    if (st) return st;
    ATTN_FAIL_IF(et != ATTN_GGUF_STRING, ctx, ATTN_E_FORMAT, "%.300s: %s is not an array of "
                 "strings", path, key);
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *sp;
        size_t len;
        ATTN_TRY(attn_gguf_arr_str(g, key, i, &sp, &len));
        ATTN_FAIL_IF(memchr(sp, 0, len) != NULL, ctx, ATTN_E_FORMAT,
                     "%.300s: %s[%llu] holds a NUL byte", path, key, (unsigned long long)i);
        ATTN_FAIL_IF(!attn__json_utf8_valid(sp, len), ctx, ATTN_E_FORMAT,
                     "%.300s: %s[%llu] is not valid UTF-8 (GGUF strings are UTF-8)", path, key,
                     (unsigned long long)i);
        total += len + 1; /* no overflow: the strings are in the file */
    }
    char **p = attn__malloc(ctx, (size_t)(n ? n : 1) * sizeof *p);
    char *t = attn__malloc(ctx, total ? total : 1);
    if (!p || !t) {
        attn__free(ctx, p), attn__free(ctx, t);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (%s)", key);
    }
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *sp;
        size_t len;
        attn_gguf_arr_str(g, key, i, &sp, &len);
        memcpy(t + off, sp, len);
        t[off + len] = 0;
        p[i] = t + off;
        off += len + 1;
    }
    *ptrs = p, *text = t, *count = n;
    return ATTN_OK;
}

/* The token types of g (tokenizer.ggml.token_type, n of them) into *types (NULL when the key
 * is absent). */
static attn_status token_types(attn_ctx *ctx, const attn_gguf *g, const char *path, uint64_t nt,
                               int32_t **types) {
    int et;
    uint64_t n;
    *types = NULL;
    attn_status st = attn_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, NULL);
    if (st == ATTN_E_NOT_FOUND) return ATTN_OK;
    ATTN_TRY(st);
    ATTN_FAIL_IF(n != nt, ctx, ATTN_E_SHAPE, "%.300s: %llu token types for %llu tokens", path,
                 (unsigned long long)n, (unsigned long long)nt);
    int32_t *t = attn__malloc(ctx, (size_t)(n ? n : 1) * sizeof *t);
    ATTN_FAIL_IF(!t, ctx, ATTN_E_NOMEM, "out of memory (token types)");
    for (uint64_t i = 0; i < n && !st; i++) {
        int64_t v;
        st = attn_gguf_arr_int(g, "tokenizer.ggml.token_type", i, INT32_MIN, INT32_MAX, &v);
        t[i] = (int32_t)v;
    }
    if (st) {
        attn__free(ctx, t);
        return st;
    }
    *types = t;
    return ATTN_OK;
}

/* A SentencePiece BPE tokenizer (tokenizer.ggml.model "llama": Gemma, Llama 2, Mistral):
 * tokens, token types, add_space_prefix (default true, as SentencePiece's) and the unknown
 * piece (tokenizer.ggml.unknown_token_id, else the first piece of type 2). */
static attn_status spm_from_gguf(attn_ctx *ctx, const attn_gguf *g, const char *path,
                                 attn_bpe **out, uint64_t *n_tokens) {
    char **tokens = NULL, *ttext = NULL;
    int32_t *types = NULL;
    size_t *lens = NULL;
    uint64_t nt = 0;
    int prefix = 1;
    attn_status st = str_array(ctx, g, "tokenizer.ggml.tokens", path, &tokens, &ttext, &nt);
    if (st == ATTN_E_NOT_FOUND)
        st = attn__fail(ctx, ATTN_E_FORMAT, "%.300s: tokenizer.ggml.tokens is missing", path);
    if (!st) st = token_types(ctx, g, path, nt, &types);
    if (!st && !(lens = attn__malloc(ctx, (size_t)(nt ? nt : 1) * sizeof *lens)))
        st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory (tokens)");
    for (uint64_t i = 0; i < nt && !st; i++) lens[i] = strlen(tokens[i]);
    if (!st) {
        int b;
        attn_status s2 = attn_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b);
        if (s2 == ATTN_OK) prefix = b;
        else if (s2 != ATTN_E_NOT_FOUND) st = s2;
    }
    int64_t unk = -1;
    if (!st) {
        attn_status s2 = attn_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", 0,
                                           (int64_t)nt - 1, &unk);
        if (s2 == ATTN_E_NOT_FOUND)
            for (uint64_t i = 0; types && i < nt && unk < 0; i++)
                if (types[i] == 2) unk = (int64_t)i;
        if (s2 != ATTN_OK && s2 != ATTN_E_NOT_FOUND) st = s2;
    }
    if (!st)
        st = attn__bpe_create_spm(ctx, (const char *const *)tokens, lens, (int64_t)nt, types,
                                  prefix, (int32_t)unk, path, out);
    attn__free(ctx, tokens), attn__free(ctx, ttext), attn__free(ctx, types);
    attn__free(ctx, lens);
    if (!st) *n_tokens = nt;
    return st;
}

/* The byte-level BPE tokenizer of g's tokenizer.ggml.* keys (path names the file in messages);
 * ATTN_E_NOT_FOUND, with no message, when g has no tokenizer.ggml.model.  *n_tokens: its
 * vocabulary size. */
static attn_status bpe_from_gguf(attn_ctx *ctx, const attn_gguf *g, const char *path,
                                 attn_bpe **out, uint64_t *n_tokens) {
    const char *model, *pre = "gpt2";
    size_t mlen, plen = 4;
    attn_status st = attn_gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen);
    if (st == ATTN_E_NOT_FOUND) return st;
    ATTN_TRY(st);
    if (mlen == 5 && !memcmp(model, "llama", 5)) return spm_from_gguf(ctx, g, path, out, n_tokens);
    ATTN_FAIL_IF(mlen != 4 || memcmp(model, "gpt2", 4) != 0, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: tokenizer model \"%.*s\" is not supported (attn reads byte-level "
                 "BPE, \"gpt2\", and SentencePiece BPE, \"llama\")", path,
                 (int)(mlen > 40 ? 40 : mlen), model);
    st = attn_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen);
    if (st == ATTN_E_NOT_FOUND) pre = "gpt2", plen = 4;
    else ATTN_TRY(st);
    char pre_name[64];
    ATTN_FAIL_IF(memchr(pre, 0, plen) != NULL, ctx, ATTN_E_FORMAT,
                 "%.300s: the pre-tokenizer name (tokenizer.ggml.pre) holds a NUL byte", path);
    ATTN_FAIL_IF(plen >= sizeof pre_name, ctx, ATTN_E_UNSUPPORTED,
                 "%.300s: pre-tokenizer \"%.40s...\" is not supported", path, pre);
    memcpy(pre_name, pre, plen), pre_name[plen] = 0;
    char **tokens = NULL, **merges = NULL, *ttext = NULL, *mtext = NULL;
    int32_t *types = NULL;
    uint64_t nt = 0, nm = 0;
    st = str_array(ctx, g, "tokenizer.ggml.tokens", path, &tokens, &ttext, &nt);
    if (st == ATTN_E_NOT_FOUND)
        st = attn__fail(ctx, ATTN_E_FORMAT, "%.300s: tokenizer.ggml.tokens is missing", path);
    if (!st) {
        st = str_array(ctx, g, "tokenizer.ggml.merges", path, &merges, &mtext, &nm);
        if (st == ATTN_E_NOT_FOUND) st = ATTN_OK, nm = 0;
    }
    if (!st) st = token_types(ctx, g, path, nt, &types);
    if (!st)
        st = attn_bpe_create(ctx, (const char *const *)tokens, (int64_t)nt, types,
                             (const char *const *)merges, (int64_t)nm, pre_name, out);
    attn__free(ctx, tokens), attn__free(ctx, ttext), attn__free(ctx, merges);
    attn__free(ctx, mtext), attn__free(ctx, types);
    if (!st) *n_tokens = nt;
    return st;
}

attn_status attn_bpe_from_gguf(attn_ctx *ctx, const attn_gguf *g, attn_bpe **out) {
    if (!ctx || !g || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_bpe_from_gguf: NULL argument");
    *out = NULL;
    uint64_t nt;
    attn_status st = bpe_from_gguf(ctx, g, "GGUF file", out, &nt);
    if (st == ATTN_E_NOT_FOUND)
        return attn__fail(ctx, st, "GGUF file: no tokenizer (tokenizer.ggml.model is missing)");
    return st;
}

/* The tokenizer, chat template and special ids of the file's tokenizer.* keys (a file
 * without tokenizer.ggml.model has none: m->tok stays NULL). */
static attn_status text_side(attn_ctx *ctx, attn_llm *m, const attn_gguf *g, const char *path) {
    uint64_t nt = 0;
    attn_status st = bpe_from_gguf(ctx, g, path, &m->tok, &nt);
    if (st == ATTN_E_NOT_FOUND) return ATTN_OK;
    if (!st && m->layers && nt != (uint64_t)m->cfg.vocab_size) /* (none: vocabulary only) */
        st = attn__fail(ctx, ATTN_E_SHAPE, "%.300s: %llu tokens for a vocabulary of %lld", path,
                        (unsigned long long)nt, (long long)m->cfg.vocab_size);
    ATTN_TRY(st);
    /* special ids and the template */
    static const char *const ids[2] = {"tokenizer.ggml.bos_token_id",
                                       "tokenizer.ggml.eos_token_id"};
    for (int k = 0; k < 2; k++) {
        int64_t v;
        st = attn_gguf_get_int(g, ids[k], 0, (int64_t)nt - 1, &v);
        if (st == ATTN_E_NOT_FOUND) continue;
        ATTN_TRY(st);
        *(k ? &m->eos : &m->bos) = (int32_t)v;
    }
    int b;
    st = attn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b);
    if (st == ATTN_OK) m->add_bos = b;
    else if (st != ATTN_E_NOT_FOUND) return st;
    attn__llm_end_tokens(m);
    const char *tp;
    size_t tlen;
    if (attn_gguf_get_str(g, "tokenizer.chat_template", &tp, &tlen) == ATTN_OK) {
        ATTN_FAIL_IF(memchr(tp, 0, tlen) != NULL, ctx, ATTN_E_FORMAT,
                     "%.300s: tokenizer.chat_template holds a NUL byte", path);
        m->chat_template = attn__malloc(ctx, tlen + 1);
        ATTN_FAIL_IF(!m->chat_template, ctx, ATTN_E_NOMEM, "out of memory (chat template)");
        memcpy(m->chat_template, tp, tlen), m->chat_template[tlen] = 0;
    }
    attn_ctx_clear_error(ctx);
    return ATTN_OK;
}

/* ATTN_LLM_LOAD_VOCAB_ONLY: the text side of any GGUF file with a tokenizer, whatever its
 * architecture (a vocabulary-only file has no tensors); the tokenizer copies what it keeps, so
 * the file is closed again. */
static attn_status vocab_only(attn_ctx *ctx, const char *path, unsigned flags, attn_llm **out) {
    attn_gguf *g = NULL;
    attn_llm *m = NULL;
    attn_status st = flags & ATTN_LLM_LOAD_NO_MMAP ? attn_gguf_read(ctx, path, &g)
                                                   : attn_gguf_open(ctx, path, &g);
    if (!st) st = attn__llm_new_vocab(ctx, &m);
    if (!st) st = text_side(ctx, m, g, path);
    if (!st && !m->tok)
        st = attn__fail(ctx, ATTN_E_NOT_FOUND, "%.300s: no tokenizer (tokenizer.ggml.model is "
                        "missing)", path);
    attn_gguf_free(g);
    if (st) {
        attn_llm_free(m);
        return st;
    }
    m->cfg.vocab_size = attn_bpe_vocab_size(m->tok);
    *out = m;
    return ATTN_OK;
}

attn_status attn_llm_load_gguf(attn_ctx *ctx, const char *path, unsigned flags,
                               attn_llm **out) {
    if (!ctx || !path || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_llm_load_gguf: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(flags & ~(unsigned)(ATTN_LLM_LOAD_F32 | ATTN_LLM_LOAD_NO_MMAP |
                                     ATTN_LLM_LOAD_MMAP | ATTN_LLM_LOAD_VOCAB_ONLY),
                 ctx, ATTN_E_INVALID, "attn_llm_load_gguf: unknown flags 0x%x", flags);
    ATTN_FAIL_IF((flags & ATTN_LLM_LOAD_MMAP) && (flags & ATTN_LLM_LOAD_NO_MMAP), ctx,
                 ATTN_E_INVALID, "attn_llm_load_gguf: ATTN_LLM_LOAD_MMAP and _NO_MMAP together");
    if (flags & ATTN_LLM_LOAD_VOCAB_ONLY) return vocab_only(ctx, path, flags, out);
    gguf_store *s = attn__calloc(ctx, 1, sizeof *s);
    ATTN_FAIL_IF(!s, ctx, ATTN_E_NOMEM, "out of memory");
    s->free = ctx->free, s->alloc_user = ctx->alloc_user;
    /* read by default: the matrices land in huge pages (attn.h, ATTN_LLM_LOAD_MMAP) */
    attn_status st = flags & ATTN_LLM_LOAD_MMAP ? attn_gguf_open(ctx, path, &s->g)
                                                : attn_gguf_read(ctx, path, &s->g);
    attn_llm_config c;
    size_t bytes = 0;
    attn_llm *m = NULL;
    int interleaved = 1;
    if (!st) st = config(ctx, s->g, path, &c, &interleaved);
    if (!st) st = attn__llm_check(ctx, &c, path, &c);
    if (!st) st = match(ctx, s->g, &c, flags, path, &bytes);
    if (!st) st = attn__llm_new(ctx, &c, path, &m);
    if (st) {
        store_free(NULL, s);
        return st;
    }
    m->store = s, m->store_free = store_free, m->store_user = NULL;
    st = fill(ctx, m, s, flags, bytes, interleaved, path);
    if (!st && m->rope_div) st = rope_freqs(ctx, s->g, &m->cfg, m->rope_div, path);
    if (!st) st = attn__llm_ready(ctx, m);
    if (!st) st = text_side(ctx, m, s->g, path);
    if (st) {
        attn_llm_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}
