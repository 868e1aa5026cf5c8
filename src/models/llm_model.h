/* The attn_llm model (src/models/llama.c) as its loaders see it.  A loader
 *   1. fills an attn_llm_config from its source's metadata (config.json for attn_llm_load_hf;
 *      a GGUF file's llama.* keys later),
 *   2. calls attn__llm_new: the config is checked and resolved, the model and its layer array
 *      allocated, every weight unset,
 *   3. sets every attn__weight (type, data, shape, bias) and the norm vectors, pointing into
 *      memory it hands to the model as m->store (freed with it by store_free, or by the model's
 *      allocator when store_free is NULL): F32 for HF folders, a quantized attn_qtype pointing
 *      into the file image for GGUF (whose converters permute the rows of q_proj and k_proj within
 *      each head for GGML's rope: set attn.rope_interleaved = 1 on every layer and use them as
 *      they are),
 *   4. calls attn__llm_ready, which checks every weight against the config (names in the
 *      messages) and computes the RoPE frequencies.
 * On failure the loader frees the model with attn_llm_free (which frees the store too). */
#ifndef ATTN_MODELS_LLM_MODEL_H
#define ATTN_MODELS_LLM_MODEL_H

#include "../layers/llm.h"

struct attn_llm {
    attn_llm_config cfg;           /* resolved: num_kv_heads and head_dim set */
    attn_free_fn free;             /* the creating context's allocator */
    void *alloc_user;
    attn__weight embed;             /* model.embed_tokens.weight [V, E] (rows: attn__weight_rows) */
    attn__weight lm_head;           /* lm_head.weight [V, E]; tied: a copy of embed */
    const float *norm;             /* model.norm.weight [E] */
    attn__block *layers;           /* [num_layers], in the same allocation as the model */
    float *inv_freq;               /* [head_dim / 2], after the layers */
    float *inv_freq_local;         /* [head_dim / 2] of rope_theta_local, or NULL */
    float *rope_div;               /* rope_scaling 3: [head_dim / 2], set by the loader before
                                      attn__llm_ready (positive, finite), else NULL */
    void *store;                   /* the weights' memory */
    void (*store_free)(void *user, void *store);
    void *store_user;
    /* the text side (NULL / -1 when the source has none; freed with the model) */
    attn_bpe *tok;                 /* the tokenizer */
    char *chat_template;           /* NUL-terminated */
    int32_t bos, eos, eot;         /* eot: the first end-of-turn token the vocabulary has */
    int32_t ends[4];               /* every end-of-turn token it has (-1: none) */
    int add_bos;                   /* 1: prompts start with bos */
    attn_module *mod;              /* trainable: the F32 parameters every weight above is bound
                                      to (llm_train.c; owner = this model), else NULL */
};

/* The one forward of the decoder-only LM, for inference (attn_llm_*) and training
 * (a trainable model, whose weights are bound to its module's parameters).  B sequences of T
 * tokens (ids, checked by the caller) through every layer, then the final norm and the head.
 * ss NULL: at positions 0 .. T-1, no cache; else B sessions: sequence b at positions
 * p .. p + T - 1 after the p = ss[b]->pos tokens of its cache.  logits [B*T, V] of every token,
 * or (last) [B, V] of each sequence's last; NULL: none (the layers only).  rec (not with ss):
 * the training record, its buffers the caller's: xs [L + 1][B T][E] (each layer's input, then
 * the last layer's output), the RoPE rows (lcs/lsn with the local base), and ls: each layer's
 * record, or NULL (checkpointed: the inputs only). */
typedef struct attn__llm_rec {
    float *xs;
    attn__rope_cs rope;
    attn__block_saved *ls;
} attn__llm_rec;
ATTN__HIDDEN attn_status attn__llm_run(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                       int64_t B, int64_t T, attn_llm_session *const *ss, int last,
                                       float *logits, attn__llm_rec *rec);

/* The model's tensors in one order, for every loader: 0 the token embedding, 1 the final
 * norm, 2 the output head, then per layer the ATTN__LT_N entries (weights, norms, then the
 * biases, which bind after their weights).  attn__llm_entry: 0 when the config has no such
 * tensor (the head when tied, biases without their flags), else its layer (-1 for 0..2), kind
 * (0..2, or ATTN__LT_*) and row-major shape [rows, cols] (cols 0: a vector).  attn__llm_bind
 * points the weight of entry i at p, stored as type (vectors: F32); rope_interleaved as
 * attn__attention's. */
enum { ATTN__LT_Q, ATTN__LT_K, ATTN__LT_V, ATTN__LT_O, ATTN__LT_GATE, ATTN__LT_UP, ATTN__LT_DOWN,
       ATTN__LT_LN1, ATTN__LT_LN2, ATTN__LT_QB, ATTN__LT_KB, ATTN__LT_VB, ATTN__LT_OB,
       ATTN__LT_GB, ATTN__LT_UB, ATTN__LT_DB, ATTN__LT_QN, ATTN__LT_KN, ATTN__LT_PA,
       ATTN__LT_PF, ATTN__LT_N };
ATTN__HIDDEN int64_t attn__llm_entry_count(const attn_llm_config *c);
ATTN__HIDDEN int attn__llm_entry(const attn_llm_config *c, int64_t i, int64_t *layer, int *kind,
                                 int64_t *rows, int64_t *cols);
ATTN__HIDDEN void attn__llm_bind(attn_llm *m, int64_t i, int type, const void *p,
                                 int rope_interleaved);

/* The checks of step 2 alone (no allocation): a loader may run them before it reads anything
 * sized by the config.  *out (may be cfg) receives the resolved config. */
ATTN__HIDDEN attn_status attn__llm_check(attn_ctx *ctx, const attn_llm_config *cfg,
                                         const char *what, attn_llm_config *out);
/* Steps 2 and 4 above.  what names the source in messages ("config.json", a file name). */
ATTN__HIDDEN attn_status attn__llm_new(attn_ctx *ctx, const attn_llm_config *cfg,
                                       const char *what, attn_llm **out);
ATTN__HIDDEN attn_status attn__llm_ready(attn_ctx *ctx, attn_llm *m);

/* An empty model (no config, no weights, no layers: ATTN_LLM_LOAD_VOCAB_ONLY's), the special
 * ids -1; the loader fills its text side. */
ATTN__HIDDEN attn_status attn__llm_new_vocab(attn_ctx *ctx, attn_llm **out);
/* Sets eot and ends from m->tok: ChatML's <|im_end|>, Gemma's <end_of_turn>, Llama 3's
 * <|eot_id|> and <|eom_id|>, where the vocabulary has them. */
ATTN__HIDDEN void attn__llm_end_tokens(attn_llm *m);
/* The checks of a full-sequence call's arguments (attn_llm_forward, the training pair): the
 * model has weights, B, T >= 1, T <= max_position_embeddings, no size overflows (a training
 * record's included), every id in [0, V).  fn names the caller in messages. */
ATTN__HIDDEN attn_status attn__llm_args(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                        int64_t B, int64_t T, const char *fn);
/* Frees the weights' memory (m->store) and forgets it. */
ATTN__HIDDEN void attn__llm_release_store(attn_llm *m);
/* 1 (the default): a prefill that returns only each sequence's last logits runs the last
 * layer's attention and feed-forward for the last rows alone (llm_run).  The tests set 0 to
 * compare with the whole layer; nothing else changes it. */
ATTN__HIDDEN extern int attn__llm_last_rows;

/* ATTN_E_INVALID, naming fn, for a model loaded with ATTN_LLM_LOAD_VOCAB_ONLY. */
ATTN__HIDDEN attn_status attn__llm_need_weights(attn_ctx *ctx, const attn_llm *m,
                                                const char *fn);

#endif
