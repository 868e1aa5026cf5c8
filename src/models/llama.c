/* Llama-architecture causal language models (attn_llm_*): the model and its two-step
 * construction (llm_model.h), the Hugging Face folder loader (config.json +
 * model.safetensors), the full-sequence forward and the generation sessions with their KV
 * cache.  The decoder layer is the shared Llama block (src/layers/llama_layer.c); every matrix
 * product goes through the one door, attn__matmul (src/layers/matmul.c).  Contract: attn.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../io/json.h"
#include "../text/chat.h"
#include "../kernels/ew.h"
#include "file.h"
#include "../kernels/decode.h"
#include "../kernels/quant.h"
#include "llm_model.h"

/* ---- the model ---------------------------------------------------------------------------- */
static void mfree(const attn_llm *m, void *p) {
    if (p) m->free(m->alloc_user, p);
}

void attn__llm_release_store(attn_llm *m) {
    if (m->store) {
        if (m->store_free) m->store_free(m->store_user, m->store);
        else mfree(m, m->store);
    }
    m->store = NULL;
}

void attn_llm_free(attn_llm *m) {
    if (!m) return;
    attn_bpe_free(m->tok);
    mfree(m, m->chat_template);
    attn__llm_release_store(m);
    if (m->mod) { /* the trainable model's parameters (llm_train.c) */
        m->mod->owner = NULL;
        attn_module_free(m->mod);
    }
    mfree(m, m);
}

attn_status attn__llm_check(attn_ctx *ctx, const attn_llm_config *cfg, const char *what,
                            attn_llm_config *out) {
    attn_llm_config c;
    ATTN_TRY(attn__llm_cfg_block(ctx, cfg, 1, 1, what, &c));
    const int64_t ll = attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
    const int64_t vl = attn_ctx_limit(ctx, ATTN_LIMIT_VOCAB);
    ATTN_FAIL_IF(c.num_layers < 1, ctx, ATTN_E_INVALID, "%s: num_hidden_layers %lld must be "
                 "positive", what, (long long)c.num_layers);
    ATTN_FAIL_IF(c.num_layers > ll, ctx, ATTN_E_UNSUPPORTED, "%s: num_hidden_layers %lld is "
                 "over ATTN_LIMIT_LAYERS (%lld)", what, (long long)c.num_layers, (long long)ll);
    ATTN_FAIL_IF(c.vocab_size < 1 || c.vocab_size > ATTN__LLM_MAX_DIM, ctx, ATTN_E_INVALID,
                 "%s: vocab_size %lld is out of range [1, %d]", what, (long long)c.vocab_size,
                 ATTN__LLM_MAX_DIM);
    ATTN_FAIL_IF(c.vocab_size > vl, ctx, ATTN_E_UNSUPPORTED, "%s: vocab_size %lld is over "
                 "ATTN_LIMIT_VOCAB (%lld)", what, (long long)c.vocab_size, (long long)vl);
    ATTN_FAIL_IF(c.max_position_embeddings < 1 || c.max_position_embeddings > ATTN__LLM_MAX_DIM,
                 ctx, ATTN_E_INVALID, "%s: max_position_embeddings %lld is out of range [1, %d]",
                 what, (long long)c.max_position_embeddings, ATTN__LLM_MAX_DIM);
    c.tie_word_embeddings = c.tie_word_embeddings != 0;
    c.mlp_bias = c.mlp_bias != 0;
    *out = c;
    return ATTN_OK;
}

attn_status attn__llm_new(attn_ctx *ctx, const attn_llm_config *cfg, const char *what,
                          attn_llm **out) {
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_check(ctx, cfg, what, &c));
    /* the model, its layers, inv_freq (global, local) and the file's RoPE divisors in one
     * allocation (layers <= ATTN_LIMIT_LAYERS) */
    size_t lay = (size_t)c.num_layers * sizeof(attn__block);
    size_t base = (sizeof(attn_llm) + 63) / 64 * 64, invo = base + (lay + 63) / 64 * 64;
    size_t total = invo + (size_t)(c.head_dim / 2) * 3 * sizeof(float);
    attn_llm *m = attn__calloc(ctx, 1, total);
    ATTN_FAIL_IF(!m, ctx, ATTN_E_NOMEM, "out of memory (attn_llm, %lld layers)",
                 (long long)c.num_layers);
    m->cfg = c;
    m->free = ctx->free;
    m->alloc_user = ctx->alloc_user;
    m->bos = m->eos = m->eot = -1;
    m->ends[0] = m->ends[1] = m->ends[2] = m->ends[3] = -1;
    m->layers = (attn__block *)((unsigned char *)m + base);
    m->inv_freq = (float *)((unsigned char *)m + invo);
    if (c.sliding_window > 0 && c.rope_theta_local != 0) /* the local layers' own base */
        m->inv_freq_local = m->inv_freq + c.head_dim / 2;
    if (c.rope_scaling == 3) m->rope_div = m->inv_freq + c.head_dim;
    *out = m;
    return ATTN_OK;
}

attn_status attn__llm_ready(attn_ctx *ctx, attn_llm *m) {
    const attn_llm_config *c = &m->cfg;
    const int64_t E = c->hidden_size, V = c->vocab_size, F = c->intermediate_size;
    const int64_t HD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
    ATTN_TRY(attn__weight_check(ctx, &m->embed, V, E, "model.embed_tokens.weight"));
    ATTN_TRY(attn__weight_check(ctx, &m->lm_head, V, E,
                               c->tie_word_embeddings ? "model.embed_tokens.weight (tied head)"
                                                      : "lm_head.weight"));
    ATTN_FAIL_IF(!m->norm, ctx, ATTN_E_NOT_FOUND, "model.norm.weight: weight not set");
    for (int64_t i = 0; i < c->num_layers; i++) {
        attn__block *l = &m->layers[i];
        char w[7][96];
        static const char *const nm[7] = {"self_attn.q_proj", "self_attn.k_proj",
                                          "self_attn.v_proj", "self_attn.o_proj",
                                          "mlp.gate_proj",    "mlp.up_proj",
                                          "mlp.down_proj"};
        for (int k = 0; k < 7; k++)
            snprintf(w[k], sizeof w[k], "model.layers.%lld.%s.weight", (long long)i, nm[k]);
        ATTN_TRY(attn__weight_check(ctx, &l->at[0].q, HD, E, w[0]));
        ATTN_TRY(attn__weight_check(ctx, &l->at[0].k, KD, E, w[1]));
        ATTN_TRY(attn__weight_check(ctx, &l->at[0].v, KD, E, w[2]));
        ATTN_TRY(attn__weight_check(ctx, &l->at[0].o, E, HD, w[3]));
        ATTN_TRY(attn__weight_check(ctx, &l->mlp.gate, F, E, w[4]));
        ATTN_TRY(attn__weight_check(ctx, &l->mlp.up, F, E, w[5]));
        ATTN_TRY(attn__weight_check(ctx, &l->mlp.down, E, F, w[6]));
        const attn__ln *n = l->norm, *pn = l->post;
        ATTN_FAIL_IF(!n[ATTN__SUB_SELF].weight || !n[ATTN__SUB_FFN].weight ||
                         (c->qk_norm && (!l->at[0].q_norm || !l->at[0].k_norm)) ||
                         (c->sandwich_norm &&
                          (!pn[ATTN__SUB_SELF].weight || !pn[ATTN__SUB_FFN].weight)),
                     ctx, ATTN_E_NOT_FOUND, "model.layers.%lld: a norm weight is not set",
                     (long long)i);
        attn__llm_block_cfg(c, i, l);
    }
    attn__llm_inv_freq(c, m->rope_div, m->inv_freq, m->inv_freq_local);
    return ATTN_OK;
}

const attn_bpe *attn_llm_tokenizer(const attn_llm *m) { return m ? m->tok : NULL; }

static int64_t w_bytes(const attn__weight *w) {
    int64_t be = 1, bb = 4;
    if (attn_qtype_block(w->type, &be, &bb) != ATTN_OK) return 0;
    return w->N * (w->K / be) * bb;
}

attn_status attn_llm_set_activations(attn_llm *m, attn_qact act) {
    if (!m) return ATTN_E_INVALID;
    if (act != ATTN_QACT_DEFAULT && act != ATTN_QACT_F32 && act != ATTN_QACT_Q8 &&
        act != ATTN_QACT_Q16)
        return ATTN_E_INVALID;
    const int a = act == ATTN_QACT_Q8    ? ATTN__QACT_Q8
                  : act == ATTN_QACT_Q16 ? ATTN__QACT_Q16
                  : act == ATTN_QACT_F32 ? ATTN__QACT_F32
                                         : ATTN__QACT_DEFAULT;
    m->lm_head.act = a;
    for (int64_t i = 0; m->layers && i < m->cfg.num_layers; i++) {
        attn__block *l = &m->layers[i];
        attn__weight *w[7] = {&l->at[0].q, &l->at[0].k, &l->at[0].v, &l->at[0].o,
                             &l->mlp.gate, &l->mlp.up, &l->mlp.down};
        for (int k = 0; k < 7; k++) w[k]->act = a;
    }
    return ATTN_OK;
}

int64_t attn_llm_weight_bytes(const attn_llm *m) {
    if (!m) return 0;
    int64_t b = w_bytes(&m->lm_head);
    for (int64_t i = 0; i < m->cfg.num_layers; i++) {
        const attn__block *l = &m->layers[i];
        b += w_bytes(&l->at[0].q) + w_bytes(&l->at[0].k) + w_bytes(&l->at[0].v) +
             w_bytes(&l->at[0].o) + w_bytes(&l->mlp.gate) + w_bytes(&l->mlp.up) +
             w_bytes(&l->mlp.down);
    }
    return b;
}

const char *attn_llm_chat_template(const attn_llm *m) { return m ? m->chat_template : NULL; }

attn_status attn_llm_get_special(const attn_llm *m, attn_llm_special *sp) {
    if (!m || !sp) return ATTN_E_INVALID;
    sp->bos = m->bos, sp->eos = m->eos, sp->eot = m->eot, sp->add_bos = m->add_bos;
    return ATTN_OK;
}

void attn__llm_end_tokens(attn_llm *m) {
    static const char *const names[4] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>",
                                         "<|eom_id|>"};
    m->eot = -1;
    for (int k = 0; k < 4; k++) {
        m->ends[k] = m->tok ? attn_bpe_token_id(m->tok, names[k]) : -1;
        if (m->eot < 0) m->eot = m->ends[k];
    }
}

int attn_llm_is_end(const attn_llm *m, int32_t id) {
    if (!m || id < 0) return 0;
    if (id == m->eos || id == m->eot) return 1;
    for (int k = 0; k < 4; k++)
        if (id == m->ends[k]) return 1;
    return 0;
}

/* attn_chat_apply with the model's template and token texts, for the API function fn. */
static attn_status llm_chat(attn_ctx *ctx, const char *fn, const attn_llm *m,
                            const attn_chat_message *msgs, int64_t n,
                            const attn_chat_options *opt, char *buf, size_t cap, size_t *len) {
    ATTN_FAIL_IF(!ctx || !m, ctx, ATTN_E_INVALID, "%s: %s is NULL", fn, !ctx ? "ctx" : "m");
    attn_chat_options o;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (!o.bos_token && m->tok && m->bos >= 0) o.bos_token = attn_bpe_token_text(m->tok, m->bos);
    if (!o.eos_token && m->tok && m->eos >= 0) o.eos_token = attn_bpe_token_text(m->tok, m->eos);
    return attn__chat_apply_as(ctx, fn, m->chat_template, msgs, n, &o, buf, cap, len);
}

attn_status attn_llm_chat_apply(attn_ctx *ctx, const attn_llm *m, const attn_chat_message *msgs,
                                int64_t n, const attn_chat_options *opt, char *buf, size_t cap,
                                size_t *len) {
    return llm_chat(ctx, "attn_llm_chat_apply", m, msgs, n, opt, buf, cap, len);
}

attn_status attn_llm_chat_format(attn_ctx *ctx, const attn_llm *m, const attn_chat_message *msgs,
                                 int64_t n, int add_generation_prompt, char *buf, size_t cap,
                                 size_t *len) {
    attn_chat_options o;
    memset(&o, 0, sizeof o);
    o.add_generation_prompt = add_generation_prompt;
    return llm_chat(ctx, "attn_llm_chat_format", m, msgs, n, &o, buf, cap, len);
}

attn_status attn_llm_set_chat_template(attn_ctx *ctx, attn_llm *m, const char *tmpl) {
    ATTN_FAIL_IF(!ctx || !m, ctx, ATTN_E_INVALID, "attn_llm_set_chat_template: %s is NULL",
                 !ctx ? "ctx" : "m");
    ATTN_FAIL_IF(ctx->free != m->free || ctx->alloc_user != m->alloc_user, ctx, ATTN_E_INVALID,
                 "attn_llm_set_chat_template: ctx's allocator is not the one m was loaded with");
    ATTN_TRY(attn_chat_template_check(ctx, tmpl));
    size_t n = strlen(tmpl);
    char *copy = attn__malloc(ctx, n + 1);
    ATTN_FAIL_IF(!copy, ctx, ATTN_E_NOMEM, "attn_llm_set_chat_template: out of memory");
    memcpy(copy, tmpl, n + 1);
    mfree(m, m->chat_template);
    m->chat_template = copy;
    return ATTN_OK;
}

attn_status attn_llm_get_info(const attn_llm *m, attn_llm_config *info) {
    if (!m || !info) return ATTN_E_INVALID;
    *info = m->cfg;
    return ATTN_OK;
}

/* ---- config.json --------------------------------------------------------------------------- */
/* An integer, or null (leaves *v: the default). */
static attn_status json_int_or_null(attn__json_reader *r, const char *key, int64_t *v) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    attn_status st = attn__json_int(r, v);
    if (st) return attn__fail(r->ctx, st, "%s %s: %s", r->what, key, attn_ctx_errmsg(r->ctx));
    return ATTN_OK;
}

static attn_status json_flag(attn__json_reader *r, const char *key, int *v) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_FAIL_IF(k != ATTN__JSON_BOOL, r->ctx, ATTN_E_FORMAT, "%s: %s must be true or false, "
                 "found %s", r->what, key, attn__json_kind_name(k));
    return attn__json_bool(r, v);
}

/* The Hugging Face families attn_llm_load_hf reads: model_type, the class architectures
 * names, and what the family fixes beyond config.json's keys (as transformers' modeling code
 * does): Qwen2's q/k/v biases, Qwen3's and Gemma 3's QK-norm, Gemma 3's sandwich norms, GEGLU,
 * embedding scale, 1 + w norms and tied head. */
typedef struct hf_family {
    const char *type, *arch;
    int attention_bias, qk_norm, gemma; /* attention_bias -1: the config's attention_bias */
} hf_family;
static const hf_family hf_families[] = {
    {"llama", "LlamaForCausalLM", -1, 0, 0},
    {"mistral", "MistralForCausalLM", 0, 0, 0},
    {"qwen2", "Qwen2ForCausalLM", 2, 0, 0},
    {"qwen3", "Qwen3ForCausalLM", -1, 1, 0},
    {"gemma3_text", "Gemma3ForCausalLM", 0, 1, 1},
};
#define HF_NFAM (int)(sizeof hf_families / sizeof *hf_families)

attn_status attn_llm_family(const attn_llm_config *c, const char **model_type,
                            const char **architecture) {
    if (!c || !model_type || !architecture)
        return ATTN_E_INVALID;
    /* the settings only one family of the table turns on */
    const char *t = c->sandwich_norm         ? "gemma3_text"
                    : c->qk_norm             ? "qwen3"
                    : c->attention_bias == 2 ? "qwen2"
                    : c->sliding_window > 0  ? "mistral"
                                             : "llama";
    for (int i = 0; i < HF_NFAM; i++)
        if (!strcmp(hf_families[i].type, t)) {
            *model_type = hf_families[i].type, *architecture = hf_families[i].arch;
            return ATTN_OK;
        }
    return ATTN_E_INVALID; /* not reached: every name above is in the table */
}

/* One RoPE parameter set (a layer type's): theta (NAN: unset), the scaling. */
typedef struct hf_rope {
    double theta, factor, low, high;
    int64_t orig;
    int type; /* attn_llm_config.rope_scaling: 0 default, 1 linear, 2 llama3 */
} hf_rope;

/* rope_scaling / rope_parameters: null, or an object of rope_type (or type) "default", "linear"
 * or "llama3" with rope_theta, factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings and partial_rotary_factor 1; or (transformers 5's Gemma 3)
 * an object of such objects per layer type, full_attention into *g and sliding_attention into
 * *l.  Anything else is a RoPE attn does not have. */
static attn_status rope_object(attn__json_reader *r, const char *key, hf_rope *g, hf_rope *l) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_FAIL_IF(k != ATTN__JSON_OBJECT, r->ctx, ATTN_E_FORMAT, "%s: %s must be an object or "
                 "null, found %s", r->what, key, attn__json_kind_name(k));
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *mk;
        ATTN_TRY(attn__json_member(r, &more, &mk, NULL));
        if (!more) break;
        ATTN_TRY(attn__json_peek(r, &k));
        if (l && k == ATTN__JSON_OBJECT &&
            (!strcmp(mk, "full_attention") || !strcmp(mk, "sliding_attention"))) {
            const int full = !strcmp(mk, "full_attention");
            ATTN_TRY(rope_object(r, full ? "rope_parameters.full_attention"
                                         : "rope_parameters.sliding_attention",
                                 full ? g : l, NULL));
        } else if (!strcmp(mk, "rope_type") || !strcmp(mk, "type")) {
            ATTN_FAIL_IF(k != ATTN__JSON_STRING, r->ctx, ATTN_E_FORMAT,
                         "%s: %s.%s must be a string", r->what, key, mk);
            const char *s;
            ATTN_TRY(attn__json_string(r, &s, NULL));
            g->type = !strcmp(s, "linear") ? 1 : !strcmp(s, "llama3") ? 2 : 0;
            ATTN_FAIL_IF(!g->type && strcmp(s, "default"), r->ctx, ATTN_E_UNSUPPORTED,
                         "%s: %s.%s \"%.64s\" is not supported (attn has \"default\", "
                         "\"linear\" and \"llama3\")", r->what, key, mk, s);
        } else if (!strcmp(mk, "rope_theta")) {
            ATTN_TRY(attn__json_double(r, "rope_theta", &g->theta));
        } else if (!strcmp(mk, "factor")) {
            ATTN_TRY(attn__json_double(r, "factor", &g->factor));
        } else if (!strcmp(mk, "low_freq_factor")) {
            ATTN_TRY(attn__json_double(r, "low_freq_factor", &g->low));
        } else if (!strcmp(mk, "high_freq_factor")) {
            ATTN_TRY(attn__json_double(r, "high_freq_factor", &g->high));
        } else if (!strcmp(mk, "original_max_position_embeddings")) {
            ATTN_TRY(json_int_or_null(r, mk, &g->orig));
        } else if (!strcmp(mk, "partial_rotary_factor")) {
            double f;
            ATTN_TRY(attn__json_double(r, "partial_rotary_factor", &f));
            ATTN_FAIL_IF(f != 1.0, r->ctx, ATTN_E_UNSUPPORTED, "%s: %s.partial_rotary_factor %g "
                         "is not supported (only 1)", r->what, key, f);
        } else {
            ATTN_TRY(attn__json_skip(r));
        }
    }
    return ATTN_OK;
}

/* An array of strings, or null (*present stays 0): each string to each(u, s). */
static attn_status json_strings(attn__json_reader *r, const char *key, int *present,
                                void (*each)(void *u, const char *s), void *u) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    *present = 1;
    ATTN_FAIL_IF(k != ATTN__JSON_ARRAY, r->ctx, ATTN_E_FORMAT,
                 "%s: %s must be an array of strings", r->what, key);
    ATTN_TRY(attn__json_array_begin(r));
    for (;;) {
        int more;
        ATTN_TRY(attn__json_element(r, &more));
        if (!more) break;
        ATTN_TRY(attn__json_peek(r, &k));
        ATTN_FAIL_IF(k != ATTN__JSON_STRING, r->ctx, ATTN_E_FORMAT,
                     "%s: %s must be an array of strings", r->what, key);
        const char *s;
        ATTN_TRY(attn__json_string(r, &s, NULL));
        each(u, s);
    }
    return ATTN_OK;
}

/* architectures (null as transformers writes for a model loaded from GGUF: model_type
 * decides): fam, the family of the first known class name (else -1); first, the first name. */
typedef struct arch_seen {
    int fam;
    char first[96];
} arch_seen;
static void arch_each(void *u, const char *s) {
    arch_seen *a = u;
    for (int i = 0; i < HF_NFAM && a->fam < 0; i++)
        if (!strcmp(s, hf_families[i].arch)) a->fam = i;
    if (!a->first[0]) snprintf(a->first, sizeof a->first, "%.80s", s);
}

/* layer_types: "full_attention" / "sliding_attention", one per layer: bit i of local set for
 * a sliding layer i < 64; n counts them all; bad: another word. */
typedef struct types_seen {
    uint64_t local;
    int64_t n;
    int bad;
} types_seen;
static void types_each(void *u, const char *s) {
    types_seen *t = u;
    const int sl = !strcmp(s, "sliding_attention");
    if (!sl && strcmp(s, "full_attention")) t->bad = 1;
    if (sl && t->n < 64) t->local |= 1ull << t->n;
    t->n++;
}

/* A string member into buf (or null: buf stays). */
static attn_status json_word(attn__json_reader *r, const char *key, char *buf, size_t n) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    ATTN_FAIL_IF(k != ATTN__JSON_STRING, r->ctx, ATTN_E_FORMAT, "%s: %s must be a string",
                 r->what, key);
    const char *s;
    ATTN_TRY(attn__json_string(r, &s, NULL));
    snprintf(buf, n, "%.80s", s);
    return ATTN_OK;
}

/* A number that must be null (or absent) for attn: *set when it is not. */
static attn_status json_null_only(attn__json_reader *r, int *set) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    *set = 1;
    return attn__json_skip(r);
}

static attn_status parse_config(attn_ctx *ctx, const char *text, size_t len, const char *path,
                                attn_llm_config *c, int *norm_plus_one) {
    memset(c, 0, sizeof *c);
    int64_t *need[6] = {&c->hidden_size, &c->intermediate_size, &c->num_layers, &c->num_heads,
                        &c->vocab_size, &c->max_position_embeddings};
    static const char *const need_name[6] = {"hidden_size", "intermediate_size",
                                             "num_hidden_layers", "num_attention_heads",
                                             "vocab_size", "max_position_embeddings"};
    for (int i = 0; i < 6; i++) *need[i] = INT64_MIN;
    c->rms_norm_eps = 1e-6;
    int have_arch = 0, have_types = 0, tie = -1, bias = 0, use_swa = 0, softcap = 0;
    arch_seen arch = {-1, ""};
    types_seen types = {0, 0, 0};
    char model_type[96] = "", act[96] = "";
    int64_t window = 0, pattern = 0, qpas = 0;
    double theta_top = NAN, theta_local_top = NAN;
    hf_rope rg = {NAN, 0, 0, 0, 0, 0}, rl = rg;
    attn__json_reader r;
    attn_status st = attn__json_open(&r, ctx, text, len, "config.json", 0);
    if (st == ATTN_OK) st = attn__json_object_begin(&r);
    while (st == ATTN_OK) {
        int more;
        const char *key;
        if ((st = attn__json_member(&r, &more, &key, NULL)) || !more) break;
        int64_t *iv = NULL;
        for (int i = 0; i < 6 && !iv; i++)
            if (!strcmp(key, need_name[i])) iv = need[i];
        if (!iv && !strcmp(key, "num_key_value_heads")) iv = &c->num_kv_heads;
        if (!iv && !strcmp(key, "head_dim")) iv = &c->head_dim;
        if (!iv && !strcmp(key, "sliding_window")) iv = &window;
        if (!iv && !strcmp(key, "sliding_window_pattern")) iv = &pattern;
        if (!iv && !strcmp(key, "query_pre_attn_scalar")) iv = &qpas;
        if (iv) {
            st = json_int_or_null(&r, key, iv);
        } else if (!strcmp(key, "rms_norm_eps")) {
            st = attn__json_double(&r, key, &c->rms_norm_eps);
        } else if (!strcmp(key, "rope_theta")) {
            st = attn__json_double(&r, key, &theta_top);
        } else if (!strcmp(key, "rope_local_base_freq")) {
            st = attn__json_double(&r, key, &theta_local_top);
        } else if (!strcmp(key, "rope_scaling") || !strcmp(key, "rope_parameters")) {
            st = rope_object(&r, key, &rg, &rl);
        } else if (!strcmp(key, "partial_rotary_factor")) {
            double f = 1.0;
            attn__json_kind k;
            st = attn__json_peek(&r, &k);
            if (!st && k == ATTN__JSON_NULL) st = attn__json_null(&r);
            else if (!st) st = attn__json_double(&r, key, &f);
            if (!st && f != 1.0)
                st = attn__fail(ctx, ATTN_E_UNSUPPORTED, "%s: partial_rotary_factor %g is not "
                                "supported (only 1)", path, f);
        } else if (!strcmp(key, "tie_word_embeddings")) {
            st = json_flag(&r, key, &tie);
        } else if (!strcmp(key, "attention_bias")) {
            st = json_flag(&r, key, &bias);
        } else if (!strcmp(key, "mlp_bias")) {
            st = json_flag(&r, key, &c->mlp_bias);
        } else if (!strcmp(key, "use_sliding_window")) {
            st = json_flag(&r, key, &use_swa);
        } else if (!strcmp(key, "final_logit_softcapping") ||
                   !strcmp(key, "attn_logit_softcapping")) {
            st = json_null_only(&r, &softcap);
        } else if (!strcmp(key, "layer_types")) {
            st = json_strings(&r, key, &have_types, types_each, &types);
        } else if (!strcmp(key, "architectures")) {
            st = json_strings(&r, key, &have_arch, arch_each, &arch);
        } else if (!strcmp(key, "model_type")) {
            st = json_word(&r, key, model_type, sizeof model_type);
        } else if (!strcmp(key, "hidden_act") || !strcmp(key, "hidden_activation")) {
            st = json_word(&r, key, act, sizeof act);
        } else {
            st = attn__json_skip(&r);
        }
    }
    if (st == ATTN_OK) st = attn__json_finish(&r);
    attn__json_close(&r);
    ATTN_TRY(st);
    /* the family: model_type, else the architectures' class */
    int fi = -1;
    for (int i = 0; i < HF_NFAM && model_type[0]; i++)
        if (!strcmp(model_type, hf_families[i].type)) fi = i;
    ATTN_FAIL_IF(model_type[0] && fi < 0, ctx, ATTN_E_UNSUPPORTED, "%s: model_type \"%s\" is "
                 "not supported (attn runs llama, mistral, qwen2, qwen3 and gemma3_text)", path,
                 model_type);
    ATTN_FAIL_IF(have_arch && arch.fam < 0, ctx, ATTN_E_UNSUPPORTED,
                 "%s: architecture \"%s\" is not supported (attn runs LlamaForCausalLM, "
                 "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and Gemma3ForCausalLM)",
                 path, arch.first[0] ? arch.first : "(none)");
    ATTN_FAIL_IF(fi >= 0 && arch.fam >= 0 && fi != arch.fam, ctx, ATTN_E_FORMAT,
                 "%s: model_type \"%s\" and architecture %s disagree", path, model_type,
                 hf_families[arch.fam].arch);
    if (fi < 0) fi = arch.fam;
    ATTN_FAIL_IF(fi < 0, ctx, ATTN_E_UNSUPPORTED,
                 "%s: neither architectures nor model_type names a model attn runs", path);
    const hf_family *f = &hf_families[fi];
    for (int i = 0; i < 6; i++)
        ATTN_FAIL_IF(*need[i] == INT64_MIN, ctx, ATTN_E_FORMAT, "%s: %s is missing", path,
                     need_name[i]);
    const int want_act = f->gemma ? 1 : 0;
    ATTN_FAIL_IF(act[0] && strcmp(act, want_act ? "gelu_pytorch_tanh" : "silu"), ctx,
                 ATTN_E_UNSUPPORTED, "%s: hidden activation \"%s\" is not supported (%s uses "
                 "\"%s\")", path, act, f->type, want_act ? "gelu_pytorch_tanh" : "silu");
    ATTN_FAIL_IF(softcap, ctx, ATTN_E_UNSUPPORTED, "%s: logit soft-capping is not supported",
                 path);
    ATTN_FAIL_IF(use_swa, ctx, ATTN_E_UNSUPPORTED, "%s: use_sliding_window is not supported "
                 "for %s (transformers' max_window_layers)", path, f->type);
    c->attention_bias = f->attention_bias >= 0 ? f->attention_bias : bias;
    c->qk_norm = f->qk_norm;
    c->tie_word_embeddings = tie >= 0 ? tie : f->gemma; /* Gemma 3's default: tied */
    /* RoPE: rope_parameters' own rope_theta first, then the top-level one */
    c->rope_theta = !isnan(rg.theta) ? rg.theta : !isnan(theta_top) ? theta_top
                                                 : f->gemma ? 1e6 : 1e4;
    c->rope_scaling = rg.type, c->rope_factor = rg.factor, c->rope_low_freq_factor = rg.low;
    c->rope_high_freq_factor = rg.high, c->rope_original_context = rg.orig;
    ATTN_FAIL_IF(rl.type, ctx, ATTN_E_UNSUPPORTED, "%s: RoPE scaling of the sliding layers is "
                 "not supported", path);
    /* sliding windows: Mistral's on every layer; Gemma 3's on all but every P-th */
    ATTN_FAIL_IF(window < 0, ctx, ATTN_E_FORMAT, "%s: sliding_window must be positive", path);
    if (f->gemma) {
        c->sandwich_norm = 1, c->mlp_act = 1;
        c->embed_scale = sqrt((double)c->hidden_size);
        *norm_plus_one = 1;
        if (!have_types) { /* sliding_window_pattern (default 6), as Gemma3TextConfig */
            const int64_t P = pattern > 0 ? pattern : 6;
            have_types = 1;
            for (int64_t i = 0; i < c->num_layers && i < 64; i++) /* (more are refused) */
                types_each(&types, (i + 1) % P ? "sliding_attention" : "full_attention");
            types.n = c->num_layers;
        }
        c->rope_theta_local = !isnan(rl.theta) ? rl.theta : !isnan(theta_local_top)
                                                              ? theta_local_top : 1e4;
    }
    if (have_types && types.local) { /* some sliding layers: the period of the global ones */
        const int64_t n = types.n;
        ATTN_FAIL_IF(types.bad || n > 64 || n != c->num_layers || window < 1, ctx,
                     ATTN_E_UNSUPPORTED, "%s: layer_types (%lld of them) must be one of "
                     "full_attention / sliding_attention per layer, at most 64, with a "
                     "sliding_window", path, (long long)n);
        int64_t P = 0;
        while (P < n && (types.local >> P & 1)) P++;
        P = P < n ? P + 1 : 0; /* 0: every layer local */
        for (int64_t i = 0; i < n; i++)
            ATTN_FAIL_IF((int)(types.local >> i & 1) != (P == 0 || (i + 1) % P != 0), ctx,
                         ATTN_E_UNSUPPORTED, "%s: layer_types: attn runs one global layer "
                         "every P layers (layer %lld breaks the pattern)", path, (long long)i);
        c->sliding_window = window, c->sliding_period = P;
    } else if (!have_types && !strcmp(f->type, "mistral")) {
        c->sliding_window = window;
    } else {
        c->rope_theta_local = 0; /* no sliding layer */
    }
    const int64_t hd = c->head_dim ? c->head_dim
                                   : c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
    ATTN_FAIL_IF(f->gemma && qpas && qpas != hd, ctx, ATTN_E_UNSUPPORTED,
                 "%s: query_pre_attn_scalar %lld differs from head_dim %lld (not supported)",
                 path, (long long)qpas, (long long)hd);
    /* head_dim / num_key_value_heads 0 and negative values are the checks' business; 0 means
     * "the default" in attn_llm_config, which a file cannot ask for with a 0 */
    ATTN_FAIL_IF(c->head_dim < 0 || c->num_kv_heads < 0, ctx, ATTN_E_FORMAT,
                 "%s: head_dim and num_key_value_heads must be positive", path);
    return ATTN_OK;
}

/* ---- the model's tensors, for every loader (llm_model.h) ---------------------------------- */
int64_t attn__llm_entry_count(const attn_llm_config *c) { return 3 + c->num_layers * ATTN__LT_N; }

int attn__llm_entry(const attn_llm_config *c, int64_t i, int64_t *layer, int *kind,
                    int64_t *rows, int64_t *cols) {
    const int64_t E = c->hidden_size, V = c->vocab_size, F = c->intermediate_size;
    const int64_t HD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
    if (i < 3) {
        if (i == 2 && c->tie_word_embeddings) return 0;
        *layer = -1, *kind = (int)i;
        *rows = i == 1 ? E : V, *cols = i == 1 ? 0 : E;
        return 1;
    }
    const int k = (int)((i - 3) % ATTN__LT_N);
    if ((k >= ATTN__LT_QB && k <= ATTN__LT_OB && !c->attention_bias) ||
        (k == ATTN__LT_OB && c->attention_bias == 2) ||
        (k >= ATTN__LT_GB && k <= ATTN__LT_DB && !c->mlp_bias))
        return 0;
    if ((k == ATTN__LT_QN || k == ATTN__LT_KN) && !c->qk_norm) return 0;
    if ((k == ATTN__LT_PA || k == ATTN__LT_PF) && !c->sandwich_norm) return 0;
    static const int vec[ATTN__LT_N] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                        1, 1, 1, 1};
    const int64_t D = c->head_dim;
    const int64_t R[ATTN__LT_N] = {HD, KD, KD, E, F, F, E, E, E, HD, KD, KD, E, F, F, E,
                                   D,  D,  E,  E};
    const int64_t C[ATTN__LT_N] = {E, E, E, HD, E, E, F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    *layer = (i - 3) / ATTN__LT_N, *kind = k;
    *rows = R[k], *cols = vec[k] ? 0 : C[k];
    return 1;
}

void attn__llm_bind(attn_llm *m, int64_t i, int type, const void *p, int rope_interleaved) {
    const attn_llm_config *c = &m->cfg;
    const int64_t E = c->hidden_size, V = c->vocab_size;
    attn__weight w0 = {type, p, 0, 0, NULL, 0};
    if (i < 3) {
        if (i == 1) {
            m->norm = p;
            return;
        }
        w0.N = V, w0.K = E;
        if (i == 0) m->embed = w0;
        else m->lm_head = w0;
        if (i == 0 && c->tie_word_embeddings) m->lm_head = m->embed;
        return;
    }
    attn__block *l = &m->layers[(i - 3) / ATTN__LT_N];
    const int k = (int)((i - 3) % ATTN__LT_N);
    const int64_t F = c->intermediate_size, HD = c->num_heads * c->head_dim,
                  KD = c->num_kv_heads * c->head_dim;
    attn__weight *w[7] = {&l->at[0].q, &l->at[0].k, &l->at[0].v, &l->at[0].o,
                         &l->mlp.gate, &l->mlp.up, &l->mlp.down};
    const int64_t N[7] = {HD, KD, KD, E, F, F, E}, K[7] = {E, E, E, HD, E, E, F};
    l->at[0].rope_interleaved = rope_interleaved;
    if (k <= ATTN__LT_DOWN) {
        w0.N = N[k], w0.K = K[k], w0.bias = w[k]->bias;
        *w[k] = w0;
    } else if (k == ATTN__LT_LN1) {
        l->norm[ATTN__SUB_SELF].weight = (float *)p;
    } else if (k == ATTN__LT_LN2) {
        l->norm[ATTN__SUB_FFN].weight = (float *)p;
    } else if (k == ATTN__LT_QN || k == ATTN__LT_KN) {
        *(k == ATTN__LT_QN ? &l->at[0].q_norm : &l->at[0].k_norm) = p;
    } else if (k == ATTN__LT_PA || k == ATTN__LT_PF) {
        l->post[k == ATTN__LT_PA ? ATTN__SUB_SELF : ATTN__SUB_FFN].weight = (float *)p;
    } else {
        w[k - ATTN__LT_QB]->bias = p; /* biases come after their weights */
    }
}

/* ---- model.safetensors --------------------------------------------------------------------- */
static const char *const lt_name[ATTN__LT_N] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
    "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight",
    "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
    "self_attn.o_proj.bias",   "mlp.gate_proj.bias",      "mlp.up_proj.bias",
    "mlp.down_proj.bias",      "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "post_attention_layernorm.weight", "post_feedforward_layernorm.weight"};

/* Entry i: 0 when the config has no such tensor, else its HF name and shape. */
static int hf_entry(const attn_llm_config *c, int64_t i, char *name, size_t n, int *nd,
                    int64_t shape[2]) {
    int64_t layer, rows, cols;
    int kind;
    if (!attn__llm_entry(c, i, &layer, &kind, &rows, &cols)) return 0;
    if (layer < 0)
        snprintf(name, n, "%s", kind == 0 ? "model.embed_tokens.weight"
                                : kind == 1 ? "model.norm.weight"
                                            : "lm_head.weight");
    else /* with sandwich norms (Gemma), the norm before the MLP is pre_feedforward_layernorm
          * and post_attention_layernorm is the one after the attention */
        snprintf(name, n, "model.layers.%lld.%s", (long long)layer,
                 c->sandwich_norm && kind == ATTN__LT_LN2 ? "pre_feedforward_layernorm.weight"
                                                          : lt_name[kind]);
    *nd = cols ? 2 : 1;
    shape[0] = rows, shape[1] = cols;
    return 1;
}

/* Every tensor of the config in st, with its shape (else the status, naming it), and the
 * bytes of their F32 copies: nothing is sized from the config before this holds. */
static attn_status hf_match(attn_ctx *ctx, const attn_llm_config *c, const attn_st *st,
                            size_t *bytes) {
    size_t total = 0;
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        char name[96];
        int nd, found;
        int64_t shape[2];
        attn_st_tensor t;
        if (!hf_entry(c, i, name, sizeof name, &nd, shape)) continue;
        ATTN_TRY(attn__param_match(ctx, st, "", name, nd, shape, 1, &t, &found));
        size_t b = ((size_t)t.numel * sizeof(float) + 63) / 64 * 64;
        ATTN_FAIL_IF(!attn__add_size(total, b, &total), ctx, ATTN_E_OVERFLOW,
                     "model weights overflow the address space");
    }
    *bytes = total;
    return ATTN_OK;
}

/* The tensors converted to F32 into one allocation (m->store), bound to m's weights. */
static attn_status hf_fill(attn_ctx *ctx, attn_llm *m, const attn_st *st, size_t bytes,
                           int plus_one) {
    unsigned char *arena = attn__malloc(ctx, bytes ? bytes : 1);
    ATTN_FAIL_IF(!arena, ctx, ATTN_E_NOMEM, "out of memory (%zu bytes of F32 weights)", bytes);
    m->store = arena;
    const int check = !(ctx->flags & ATTN_CTX_NO_FINITE_CHECK);
    size_t off = 0;
    /* biases are bound after their weights: entries run weights first within a layer */
    for (int64_t i = 0; i < attn__llm_entry_count(&m->cfg); i++) {
        char name[96];
        int nd;
        int64_t shape[2];
        attn_st_tensor t;
        if (!hf_entry(&m->cfg, i, name, sizeof name, &nd, shape)) continue;
        ATTN_TRY(attn_st_find(st, name, &t));
        float *p = (float *)(arena + off);
        off += ((size_t)t.numel * sizeof(float) + 63) / 64 * 64;
        ATTN_TRY(attn_st_to_f32(ctx, &t, p, (size_t)t.numel));
        int64_t layer, rows, cols;
        int kind;
        attn__llm_entry(&m->cfg, i, &layer, &kind, &rows, &cols);
        const int norm = layer < 0 ? kind == 1
                                   : (kind == ATTN__LT_LN1 || kind == ATTN__LT_LN2 ||
                                      kind == ATTN__LT_QN || kind == ATTN__LT_KN ||
                                      kind == ATTN__LT_PA || kind == ATTN__LT_PF);
        for (int64_t j = 0; plus_one && norm && j < t.numel; j++)
            p[j] = 1.0f + p[j]; /* Gemma3RMSNorm: x (1 + w), the sum in float */
        for (int64_t j = 0; check && j < t.numel; j++)
            ATTN_FAIL_IF(!isfinite(p[j]), ctx, ATTN_E_NONFINITE,
                         "tensor \"%s\" holds %g at element %lld", name, (double)p[j],
                         (long long)j);
        attn__llm_bind(m, i, ATTN_Q_F32, p, 0);
    }
    return ATTN_OK;
}

/* ---- tokenizer.json and tokenizer_config.json ------------------------------------------ */
/* A special token of tokenizer_config.json: a string, or an object with "content". */
static attn_status special_token(attn__json_reader *r, const char **s) {
    attn__json_kind k;
    ATTN_TRY(attn__json_peek(r, &k));
    *s = NULL;
    if (k == ATTN__JSON_NULL) return attn__json_null(r);
    size_t len;
    if (k == ATTN__JSON_STRING) return attn__json_string(r, s, &len);
    if (k != ATTN__JSON_OBJECT) return attn__json_skip(r);
    ATTN_TRY(attn__json_object_begin(r));
    for (;;) {
        int more;
        const char *key;
        size_t kl;
        ATTN_TRY(attn__json_member(r, &more, &key, &kl));
        if (!more) return ATTN_OK;
        attn__json_kind vk;
        ATTN_TRY(attn__json_peek(r, &vk));
        if (!strcmp(key, "content") && vk == ATTN__JSON_STRING)
            ATTN_TRY(attn__json_string(r, s, &len));
        else
            ATTN_TRY(attn__json_skip(r));
    }
}

/* The folder's tokenizer.json (if any) and tokenizer_config.json (if any): chat_template,
 * bos_token, eos_token, add_bos_token. */
static attn_status hf_text_side(attn_ctx *ctx, attn_llm *m, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    attn_status st = attn_bpe_load_json(ctx, path, &m->tok);
    if (st == ATTN_E_NOT_FOUND) {
        m->tok = NULL;
        attn_ctx_clear_error(ctx);
        return ATTN_OK; /* weights alone */
    }
    ATTN_TRY(st);
    attn__llm_end_tokens(m);
    unsigned char *text = NULL;
    size_t len = 0;
    ATTN_TRY(attn__folder_text_read(ctx, dir, "tokenizer_config.json", NULL, &text, &len));
    if (!text) return ATTN_OK;
    attn__json_reader r;
    st = attn__json_open(&r, ctx, text, len, "tokenizer_config.json", 0);
    const char *bos = NULL, *eos = NULL, *tmpl = NULL;
    if (!st) st = attn__json_object_begin(&r);
    while (!st) {
        int more;
        const char *key;
        size_t kl, sl;
        attn__json_kind k;
        st = attn__json_member(&r, &more, &key, &kl);
        if (st || !more) break;
        st = attn__json_peek(&r, &k);
        if (st) break;
        if (!strcmp(key, "bos_token")) st = special_token(&r, &bos);
        else if (!strcmp(key, "eos_token")) st = special_token(&r, &eos);
        else if (!strcmp(key, "chat_template") && k == ATTN__JSON_STRING)
            st = attn__json_string(&r, &tmpl, &sl);
        else if (!strcmp(key, "add_bos_token") && k == ATTN__JSON_BOOL)
            st = attn__json_bool(&r, &m->add_bos);
        else st = attn__json_skip(&r);
    }
    if (!st) st = attn__json_finish(&r);
    if (!st && bos) m->bos = attn_bpe_token_id(m->tok, bos);
    if (!st && eos) m->eos = attn_bpe_token_id(m->tok, eos);
    if (!st && tmpl) {
        size_t tl = strlen(tmpl);
        m->chat_template = attn__malloc(ctx, tl + 1);
        if (!m->chat_template) st = attn__fail(ctx, ATTN_E_NOMEM, "out of memory");
        else memcpy(m->chat_template, tmpl, tl + 1);
    }
    attn__json_close(&r);
    attn__free(ctx, text);
    return st;
}

attn_status attn__llm_new_vocab(attn_ctx *ctx, attn_llm **out) {
    attn_llm *m = attn__calloc(ctx, 1, sizeof *m);
    ATTN_FAIL_IF(!m, ctx, ATTN_E_NOMEM, "out of memory");
    m->free = ctx->free;
    m->alloc_user = ctx->alloc_user;
    m->bos = m->eos = m->eot = -1;
    m->ends[0] = m->ends[1] = m->ends[2] = m->ends[3] = -1;
    *out = m;
    return ATTN_OK;
}

attn_status attn__llm_need_weights(attn_ctx *ctx, const attn_llm *m, const char *fn) {
    ATTN_FAIL_IF(!m->layers, ctx, ATTN_E_INVALID, "%s: the model was loaded with "
                 "ATTN_LLM_LOAD_VOCAB_ONLY: it has a tokenizer but no weights", fn);
    return ATTN_OK;
}

attn_status attn_llm_load(attn_ctx *ctx, const char *path, unsigned flags, attn_llm **out) {
    if (!ctx || !path || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_llm_load: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF((flags & ATTN_LLM_LOAD_MMAP) && (flags & ATTN_LLM_LOAD_NO_MMAP), ctx,
                 ATTN_E_INVALID, "attn_llm_load: ATTN_LLM_LOAD_MMAP and _NO_MMAP together");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        ATTN_FAIL_IF(flags & ~(unsigned)(ATTN_LLM_LOAD_F32 | ATTN_LLM_LOAD_NO_MMAP |
                                         ATTN_LLM_LOAD_MMAP | ATTN_LLM_LOAD_VOCAB_ONLY),
                     ctx, ATTN_E_INVALID, "attn_llm_load: unknown flags 0x%x", flags);
        if (!(flags & ATTN_LLM_LOAD_VOCAB_ONLY)) return attn_llm_load_hf(ctx, path, out);
        attn_llm *m = NULL;
        ATTN_TRY(attn__llm_new_vocab(ctx, &m));
        attn_status st = hf_text_side(ctx, m, path);
        if (!st && !m->tok)
            st = attn__fail(ctx, ATTN_E_NOT_FOUND, "%.300s: no tokenizer.json (a vocabulary-"
                            "only load needs one)", path);
        if (st) {
            attn_llm_free(m);
            return st;
        }
        m->cfg.vocab_size = attn_bpe_vocab_size(m->tok);
        *out = m;
        return ATTN_OK;
    }
    return attn_llm_load_gguf(ctx, path, flags, out);
}

attn_status attn_llm_load_hf(attn_ctx *ctx, const char *dir, attn_llm **out) {
    if (!ctx || !dir || !out)
        return attn__fail(ctx, ATTN_E_INVALID, "attn_llm_load_hf: NULL argument");
    *out = NULL;
    unsigned char *text = NULL;
    size_t len = 0;
    ATTN_TRY(attn__folder_text_read(ctx, dir, "config.json", "not a Hugging Face model folder",
                                    &text, &len));
    char path[4096]; /* for messages: attn__folder_text_read checked that it fits */
    snprintf(path, sizeof path, "%s/config.json", dir);
    attn_llm_config c;
    int plus_one = 0;
    attn_status st = parse_config(ctx, (const char *)text, len, path, &c, &plus_one);
    attn__free(ctx, text);
    ATTN_TRY(st);
    ATTN_TRY(attn__llm_check(ctx, &c, "config.json", &c));
    /* the weights' file first: every tensor must be there with its shape before the model or
     * anything else is sized from config.json */
    attn_st *sf = NULL;
    st = attn__st_read_folder(ctx, dir, &sf);
    ATTN_TRY(st);
    size_t bytes = 0;
    attn_llm *m = NULL;
    st = hf_match(ctx, &c, sf, &bytes);
    if (!st) st = attn__llm_new(ctx, &c, "config.json", &m);
    if (!st) st = hf_fill(ctx, m, sf, bytes, plus_one);
    attn_st_free(sf);
    if (!st) st = attn__llm_ready(ctx, m);
    if (!st) st = hf_text_side(ctx, m, dir);
    if (st) {
        attn_llm_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

/* ---- forward ------------------------------------------------------------------------------- */
/* A session's cache: per layer, k and v [Hkv][cap][D]. */
struct attn_llm_session {
    const attn_llm *m;
    attn_free_fn free;
    void *alloc_user;
    attn_dtype dtype;
    int64_t cap, pos;
    size_t layer_bytes; /* of one layer's k (or v) */
    unsigned char *k, *v;
};

static attn_status check_ids(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t n,
                             const char *fn) {
    for (int64_t i = 0; i < n; i++)
        ATTN_FAIL_IF(ids[i] < 0 || ids[i] >= m->cfg.vocab_size, ctx, ATTN_E_INVALID,
                     "%s: token id %lld at %lld is out of range [0, %lld)", fn,
                     (long long)ids[i], (long long)i, (long long)m->cfg.vocab_size);
    return ATTN_OK;
}

/* attn__llm_run, or with lens (no record, ss given): B sequences of lens[b] rows each, one
 * after the other in ids, all over ATTN__QMV_ROWS rows or none (each row then gets the bits
 * of its sequence's call alone). */
int attn__llm_last_rows = 1;

static attn_status llm_run(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                           int64_t T, const int64_t *lens, attn_llm_session *const *ss, int last,
                           float *logits, attn__llm_rec *rec) {
    const attn_llm_config *c = &m->cfg;
    int64_t M = B * T;
    const int64_t E = c->hidden_size, h = c->head_dim / 2, L = c->num_layers;
    int64_t bio = B, tio = T; /* the blocks' B and T: with lens, the products' kernel choice */
    if (lens) {
        M = 0;
        for (int64_t b = 0; b < B; b++) M += lens[b];
        if (lens[0] > ATTN__QMV_ROWS) bio = 1, tio = M;
        else bio = M, tio = 1;
    }
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *x, *cs, *sn, *lcs = NULL, *lsn = NULL;
    int64_t *pos;
    if (rec) { /* the record's buffers: x is layer 0's input */
        x = rec->xs, cs = (float *)rec->rope.cs, sn = (float *)rec->rope.sn;
        lcs = (float *)rec->rope.lcs, lsn = (float *)rec->rope.lsn;
    } else {
        ATTN_TRYG(attn__ws_f32(ctx, &x, M, E, 1, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &cs, M, h, 1, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &sn, M, h, 1, 1));
        if (m->inv_freq_local) { /* the local layers' RoPE base */
            ATTN_TRYG(attn__ws_f32(ctx, &lcs, M, h, 1, 1));
            ATTN_TRYG(attn__ws_f32(ctx, &lsn, M, h, 1, 1));
        }
    }
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)M, sizeof *pos, (void **)&pos));
    if (lens)
        for (int64_t b = 0, i = 0; b < B; b++)
            for (int64_t t = 0; t < lens[b]; t++) pos[i++] = ss[b]->pos + t;
    else
        for (int64_t i = 0; i < M; i++)
            pos[i] = (ss ? ss[i / T]->pos : 0) + i % T;
    attn__rope_table(m->inv_freq, c->head_dim, pos, 0, M, cs, sn);
    if (m->inv_freq_local)
        attn__rope_table(m->inv_freq_local, c->head_dim, pos, 0, M, lcs, lsn);
    ATTN_TRYG(attn__weight_rows(ctx, &m->embed, ids, M, x));
    if (c->embed_scale != 0) { /* Gemma: times sqrt(E), rounded to float as HF's buffer */
        const float sc = (float)c->embed_scale;
        for (int64_t i = 0; i < M * E; i++) x[i] *= sc;
    }
    const attn__rope_cs rr = {cs, sn, lcs, lsn};
    attn__kv *kv = NULL;
    if (ss)
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, sizeof *kv, (void **)&kv));
    /* Only the last rows' logits wanted: the last layer attends and runs its feed-forward for
     * each sequence's last row alone (every row's keys and values still go to the cache), as
     * llama.cpp does, with the bits those rows get among all (the GEMM and fused-attention
     * paths of a sequence of more than ATTN__DECODE_MAX_L rows). */
    int lastl = logits && last && ss && !rec && attn__llm_last_rows &&
                !(attn_ctx_flags(ctx) & ATTN_CTX_BF16_MATMUL);
    for (int64_t b = 0; lastl && b < B; b++)
        lastl = (lens ? lens[b] : T) > ATTN__DECODE_MAX_L;
    for (int64_t l = 0; l < L; l++) {
        for (int64_t b = 0; ss && b < B; b++) { /* each sequence's slice of this layer */
            const attn_llm_session *s = ss[b];
            kv[b].dtype = s->dtype;
            kv[b].k = s->k + (size_t)l * s->layer_bytes;
            kv[b].v = s->v + (size_t)l * s->layer_bytes;
            kv[b].cap = s->cap, kv[b].pos = s->pos, kv[b].len = lens ? lens[b] : T;
        }
        attn__block_io io = attn__block_io_causal(bio, tio, &rr, rec ? NULL : kv);
        if (lens) io.nkv = B;
        io.last_rows = lastl && l == L - 1;
        if (rec) /* layer l from its kept input into the next one's */
            ATTN_TRYG(attn__block_fwd(ctx, &m->layers[l], x + l * M * E, x + (l + 1) * M * E,
                                      &io, rec->ls ? &rec->ls[l] : NULL));
        else
            ATTN_TRYG(attn__block_fwd(ctx, &m->layers[l], x, x, &io, NULL));
    }
    if (!logits)
        goto done;
    const float *xl = rec ? x + L * M * E : x;
    const int64_t rows = last ? B : M;
    float *n;
    ATTN_TRYG(attn__ws_f32(ctx, &n, rows, E, 1, 1));
    const int pick = last && (lens || T > 1) && !lastl; /* each sequence's last row */
    for (int64_t b = 0, r = 0; pick && b < B; b++) {
        r += lens ? lens[b] : T;
        memcpy(n + b * E, xl + (r - 1) * E, (size_t)E * sizeof(float));
    }
    attn__rms_norm(ctx, pick ? n : xl, E, m->norm, (float)c->rms_norm_eps, n, E, rows, E);
    ATTN_TRYG(attn__matmul(ctx, &m->lm_head, n, E, rows, last ? 1 : T, NULL, logits,
                           c->vocab_size));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__llm_run(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                          int64_t T, attn_llm_session *const *ss, int last, float *logits,
                          attn__llm_rec *rec) {
    return llm_run(ctx, m, ids, B, T, NULL, ss, last, logits, rec);
}

/* attn__llm_run without a record. */
static attn_status run(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B, int64_t T,
                       attn_llm_session *const *ss, int last, float *logits) {
    return attn__llm_run(ctx, m, ids, B, T, ss, last, logits, NULL);
}

attn_status attn__llm_args(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                           int64_t T, const char *fn) {
    ATTN_TRY(attn__llm_need_weights(ctx, m, fn));
    ATTN_FAIL_IF(B < 1 || T < 1, ctx, ATTN_E_INVALID,
                 "%s: B (%lld) and T (%lld) must be positive", fn, (long long)B, (long long)T);
    ATTN_FAIL_IF(T > m->cfg.max_position_embeddings, ctx, ATTN_E_INVALID,
                 "%s: T %lld is over max_position_embeddings %lld", fn, (long long)T,
                 (long long)m->cfg.max_position_embeddings);
    /* the logits, and a training record's L + 4 rows of E floats a token */
    int64_t M, n;
    ATTN_FAIL_IF(!attn__mul_i64(B, T, &M) || !attn__mul_i64(M, m->cfg.vocab_size, &n) ||
                     !attn__mul_i64(M, m->cfg.hidden_size * (m->cfg.num_layers + 4), &n),
                 ctx, ATTN_E_OVERFLOW, "%s: B x T = %lld x %lld is too large", fn, (long long)B,
                 (long long)T);
    return check_ids(ctx, m, ids, M, fn);
}

attn_status attn_llm_forward(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                             int64_t T, float *logits) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !ids || !logits, ctx, ATTN_E_INVALID, "attn_llm_forward: NULL argument");
    ATTN_TRY(attn__llm_args(ctx, m, ids, B, T, "attn_llm_forward"));
    return run(ctx, m, ids, B, T, NULL, 0, logits);
}

/* ---- sessions ------------------------------------------------------------------------------ */
attn_status attn_llm_session_create(attn_ctx *ctx, const attn_llm *m, int64_t capacity,
                                    attn_dtype cache_dtype, attn_llm_session **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !out, ctx, ATTN_E_INVALID, "attn_llm_session_create: NULL argument");
    *out = NULL;
    ATTN_TRY(attn__llm_need_weights(ctx, m, "attn_llm_session_create"));
    ATTN_FAIL_IF(cache_dtype != ATTN_F32 && cache_dtype != ATTN_BF16, ctx, ATTN_E_UNSUPPORTED,
                 "attn_llm_session_create: the cache is F32 or BF16, not %s",
                 attn_dtype_name(cache_dtype) ? attn_dtype_name(cache_dtype) : "(unknown)");
    ATTN_FAIL_IF(capacity < 1 || capacity > m->cfg.max_position_embeddings, ctx, ATTN_E_INVALID,
                 "attn_llm_session_create: capacity %lld is outside [1, %lld] "
                 "(max_position_embeddings)", (long long)capacity,
                 (long long)m->cfg.max_position_embeddings);
    const attn_llm_config *c = &m->cfg;
    size_t lb, all;
    int ok = attn__mul_size((size_t)c->num_kv_heads, (size_t)capacity, &lb) &&
             attn__mul_size(lb, (size_t)c->head_dim, &lb) &&
             attn__mul_size(lb, attn_dtype_size(cache_dtype), &lb) &&
             attn__mul_size(lb, (size_t)c->num_layers, &all);
    ATTN_FAIL_IF(!ok, ctx, ATTN_E_OVERFLOW, "attn_llm_session_create: a cache of %lld tokens "
                 "overflows the address space", (long long)capacity);
    attn_llm_session *s = attn__calloc(ctx, 1, sizeof *s);
    unsigned char *k = s ? attn__malloc(ctx, all) : NULL;
    unsigned char *v = k ? attn__malloc(ctx, all) : NULL;
    if (!v) {
        attn__free(ctx, k);
        attn__free(ctx, s);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (a KV cache of 2 x %zu bytes)", all);
    }
    s->m = m;
    s->free = ctx->free, s->alloc_user = ctx->alloc_user;
    s->dtype = cache_dtype;
    s->cap = capacity;
    s->layer_bytes = lb;
    s->k = k, s->v = v;
    *out = s;
    return ATTN_OK;
}

void attn_llm_session_free(attn_llm_session *s) {
    if (!s) return;
    s->free(s->alloc_user, s->k);
    s->free(s->alloc_user, s->v);
    s->free(s->alloc_user, s);
}

void attn_llm_session_reset(attn_llm_session *s) {
    if (s) s->pos = 0;
}

attn_status attn_llm_session_rewind(attn_llm_session *s, int64_t pos) {
    if (!s || pos < 0 || pos > s->pos) return ATTN_E_INVALID;
    s->pos = pos;
    return ATTN_OK;
}

attn_status attn_llm_session_copy(attn_llm_session *dst, const attn_llm_session *src,
                                  int64_t n) {
    if (!dst || !src || dst == src || dst->m != src->m || dst->dtype != src->dtype || n < 0 ||
        n > src->pos || n > dst->cap)
        return ATTN_E_INVALID;
    const attn_llm_config *c = &src->m->cfg;
    const size_t row = (size_t)c->head_dim * attn_dtype_size(src->dtype), len = (size_t)n * row;
    for (int64_t l = 0; l < c->num_layers; l++)
        for (int64_t h = 0; h < c->num_kv_heads; h++) {
            const size_t so = (size_t)l * src->layer_bytes + (size_t)h * (size_t)src->cap * row,
                         d0 = (size_t)l * dst->layer_bytes + (size_t)h * (size_t)dst->cap * row;
            memcpy(dst->k + d0, src->k + so, len);
            memcpy(dst->v + d0, src->v + so, len);
        }
    dst->pos = n;
    return ATTN_OK;
}

int64_t attn_llm_session_pos(const attn_llm_session *s) { return s ? s->pos : 0; }
int64_t attn_llm_session_capacity(const attn_llm_session *s) { return s ? s->cap : 0; }

static attn_status step(attn_ctx *ctx, attn_llm_session *s, const int32_t *ids, int64_t n,
                        float *logits, int all, const char *fn) {
    const attn_llm *m = s->m;
    ATTN_FAIL_IF(n > s->cap - s->pos, ctx, ATTN_E_OVERFLOW,
                 "%s: context full: %lld tokens in the cache, %lld more do not fit its capacity "
                 "of %lld", fn, (long long)s->pos, (long long)n, (long long)s->cap);
    ATTN_TRY(check_ids(ctx, m, ids, n, fn));
    if (logits)
        ATTN_TRY(run(ctx, m, ids, 1, n, &s, !all, logits));
    else { /* the last token's logits are not wanted: still the same pass, into scratch */
        attn__mark mk = attn__ws_mark(ctx);
        float *lg;
        attn_status st = attn__ws_f32(ctx, &lg, m->cfg.vocab_size, 1, 1, 1);
        if (!st)
            st = run(ctx, m, ids, 1, n, &s, 1, lg);
        attn__ws_release(ctx, mk);
        ATTN_TRY(st);
    }
    s->pos += n;
    return ATTN_OK;
}

attn_status attn_llm_session_prefill(attn_ctx *ctx, attn_llm_session *s, const int32_t *ids,
                                     int64_t n, float *logits_last) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || !ids, ctx, ATTN_E_INVALID, "attn_llm_session_prefill: NULL argument");
    ATTN_FAIL_IF(n < 1, ctx, ATTN_E_INVALID, "attn_llm_session_prefill: n %lld must be positive",
                 (long long)n);
    return step(ctx, s, ids, n, logits_last, 0, "attn_llm_session_prefill");
}

attn_status attn_llm_session_prefill_logits(attn_ctx *ctx, attn_llm_session *s,
                                            const int32_t *ids, int64_t n, float *logits) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || !ids || !logits, ctx, ATTN_E_INVALID,
                 "attn_llm_session_prefill_logits: NULL argument");
    ATTN_FAIL_IF(n < 1, ctx, ATTN_E_INVALID,
                 "attn_llm_session_prefill_logits: n %lld must be positive", (long long)n);
    return step(ctx, s, ids, n, logits, 1, "attn_llm_session_prefill_logits");
}

attn_status attn_llm_session_decode(attn_ctx *ctx, attn_llm_session *s, int32_t id,
                                    float *logits) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || !logits, ctx, ATTN_E_INVALID, "attn_llm_session_decode: NULL argument");
    return step(ctx, s, &id, 1, logits, 0, "attn_llm_session_decode");
}

/* The checks of a batch of n sessions taking lens[i] tokens each (NULL: one), before any
 * cache changes; *total: the tokens. */
static attn_status batch_check(attn_ctx *ctx, attn_llm_session *const *s, int64_t n,
                               const int64_t *lens, int64_t *total, const char *fn) {
    ATTN_FAIL_IF(n < 1 || n > ATTN_LLM_BATCH_MAX, ctx, ATTN_E_INVALID,
                 "%s: n %lld must be in [1, %d]", fn, (long long)n, ATTN_LLM_BATCH_MAX);
    *total = 0;
    for (int64_t i = 0; i < n; i++) {
        ATTN_FAIL_IF(!s[i], ctx, ATTN_E_INVALID, "%s: session %lld is NULL", fn, (long long)i);
        ATTN_FAIL_IF(s[i]->m != s[0]->m, ctx, ATTN_E_INVALID,
                     "%s: session %lld belongs to another model than session 0", fn, (long long)i);
        for (int64_t j = 0; j < i; j++)
            ATTN_FAIL_IF(s[j] == s[i], ctx, ATTN_E_INVALID,
                         "%s: sessions %lld and %lld are the same one", fn, (long long)j,
                         (long long)i);
        const int64_t len = lens ? lens[i] : 1;
        ATTN_FAIL_IF(len < 1, ctx, ATTN_E_INVALID, "%s: lens[%lld] = %lld must be positive", fn,
                     (long long)i, (long long)len);
        ATTN_FAIL_IF(len > s[i]->cap - s[i]->pos, ctx, ATTN_E_OVERFLOW,
                     "%s: session %lld is full: %lld tokens in the cache, %lld more do not fit "
                     "its capacity of %lld", fn, (long long)i, (long long)s[i]->pos,
                     (long long)len, (long long)s[i]->cap);
        *total += len; /* <= n x max_position_embeddings: no overflow */
    }
    return ATTN_OK;
}

attn_status attn_llm_session_decode_batch(attn_ctx *ctx, attn_llm_session *const *s,
                                          const int32_t *ids, int64_t n, float *logits) {
    static const char fn[] = "attn_llm_session_decode_batch";
    if (!ctx)
        return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || !ids || !logits, ctx, ATTN_E_INVALID, "%s: NULL argument", fn);
    int64_t total;
    ATTN_TRY(batch_check(ctx, s, n, NULL, &total, fn));
    ATTN_TRY(check_ids(ctx, s[0]->m, ids, n, fn));
    ATTN_TRY(run(ctx, s[0]->m, ids, n, 1, s, 1, logits));
    for (int64_t i = 0; i < n; i++)
        s[i]->pos++;
    return ATTN_OK;
}

/* The sessions of a prefill batch with more than ATTN__QMV_ROWS tokens (longs 1) or not: one
 * pass of the model, with their ids gathered and their last logits scattered to their rows. */
static attn_status prefill_group(attn_ctx *ctx, attn_llm_session *const *s, int64_t n,
                                 const int32_t *ids, const int64_t *lens, int longs,
                                 float *logits) {
    const attn_llm *m = s[0]->m;
    const int64_t V = m->cfg.vocab_size;
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    attn_llm_session **gs;
    int64_t *gl, *at, k = 0, tot = 0;
    int32_t *gi;
    float *lg;
    for (int64_t i = 0; i < n; i++)
        if ((lens[i] > ATTN__QMV_ROWS) == longs) k++, tot += lens[i];
    if (!k) return ATTN_OK;
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)k, sizeof *gs, (void **)&gs));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)k, sizeof *gl, (void **)&gl));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)k, sizeof *at, (void **)&at));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)tot, sizeof *gi, (void **)&gi));
    ATTN_TRYG(attn__ws_f32(ctx, &lg, k, V, 1, 1));
    k = tot = 0;
    for (int64_t i = 0, r = 0; i < n; r += lens[i], i++)
        if ((lens[i] > ATTN__QMV_ROWS) == longs) {
            gs[k] = s[i], gl[k] = lens[i], at[k++] = i;
            memcpy(gi + tot, ids + r, (size_t)lens[i] * sizeof *gi);
            tot += lens[i];
        }
    ATTN_TRYG(llm_run(ctx, m, gi, k, 1, gl, gs, 1, lg, NULL));
    for (int64_t j = 0; j < k; j++) {
        gs[j]->pos += gl[j];
        if (logits) memcpy(logits + at[j] * V, lg + j * V, (size_t)V * sizeof(float));
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_llm_session_prefill_batch(attn_ctx *ctx, attn_llm_session *const *s,
                                           const int32_t *ids, const int64_t *lens, int64_t n,
                                           float *logits_last) {
    static const char fn[] = "attn_llm_session_prefill_batch";
    if (!ctx)
        return ATTN_E_INVALID;
    ATTN_FAIL_IF(!s || !ids || !lens, ctx, ATTN_E_INVALID, "%s: NULL argument", fn);
    int64_t total;
    ATTN_TRY(batch_check(ctx, s, n, lens, &total, fn));
    ATTN_TRY(check_ids(ctx, s[0]->m, ids, total, fn));
    /* the long ones, then the short ones: each group in one pass, with the kernels each
     * session's call alone would take */
    attn_status st = prefill_group(ctx, s, n, ids, lens, 1, logits_last);
    if (st == ATTN_OK)
        st = prefill_group(ctx, s, n, ids, lens, 0, logits_last);
    return st;
}
