/* The training half of the one decoder-only LM (attn_llm): a model's weights as F32 master
 * parameters in a module (attn_llm_module), named as HF's *ForCausalLM state_dict, for every
 * family attn_llm runs but a file's own RoPE divisors.  attn_llm_create makes a new trainable
 * model, attn_llm_make_trainable turns a loaded one into one in place (its weights copied or
 * dequantized into the parameters); either way the model's weights are bound to the parameters
 * through the loaders' own entry table (attn__llm_entry / attn__llm_bind), so inference,
 * sessions and training all run the same blocks (src/layers/block.c) through the one forward
 * (attn__llm_run).  Here: the training forward that records what the backward reads
 * (attn_saved, optionally checkpointed), and the backward to every parameter (tied head: both
 * uses into the embedding's gradient).  Also attn_llama_set_rope_interleaved for the Llama
 * modules and a trainable model's module. */
#include <stdio.h>
#include <string.h>

#include "../kernels/ew.h"
#include "../kernels/quant.h"
#include "llm_model.h"
#include "pool.h"

typedef struct lm_layer {
    attn__lin attn[4]; /* q_proj, k_proj, v_proj, o_proj */
    attn__lin mlp[3];  /* gate_proj, up_proj, down_proj */
    float *ln1, *ln2;  /* input_layernorm, post_attention_layernorm (sandwich:
                          pre_feedforward_layernorm) */
    float *qn, *kn;    /* self_attn.q_norm, k_norm [D] (qk_norm) */
    float *pa, *pf;    /* sandwich: post_attention_layernorm, post_feedforward_layernorm */
} lm_layer;

/* The module's impl: the parameters' places; the model they are the weights of. */
typedef struct lm {
    const attn_llm *llm;     /* the owner (its layers, embedding, head and norm are bound here) */
    float *embed, *norm;
    attn__lin head;          /* untied only (tied: the head is embed) */
    lm_layer *ll;            /* [L], in m->extra */
    int64_t lay_at, lay_len; /* arena offsets of layer i: [lay_at + i lay_len, + lay_len) */
} lm;

/* ---- construction -------------------------------------------------------------------------- */
/* The parameters of configuration c (resolved), in HF's state_dict order, zeros and norm
 * weights 1; their init kinds as HF's _init_weights. */
static attn_status lm_params(attn_ctx *ctx, const attn_llm_config *c, attn_module **out) {
    const int64_t L = c->num_layers, E = c->hidden_size, V = c->vocab_size;
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LLM, sizeof(lm), &m));
    lm *q = m->impl;
    /* layers <= ATTN_LIMIT_LAYERS (checked): no overflow */
    m->extra = attn__calloc(ctx, (size_t)L, sizeof(lm_layer));
    if (!m->extra) {
        attn_module_free(m);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (attn_llm parameters, %lld layers)",
                          (long long)L);
    }
    q->ll = m->extra;
    attn_status st =
        attn__param_reg(ctx, m, "", "model.embed_tokens.weight", &q->embed, 0.0f, 2, V, E, 0);
    q->lay_at = m->numel;
    for (int64_t i = 0; i < L && !st; i++) {
        char pre[64], pa[96], pm[96];
        snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)i);
        snprintf(pa, sizeof pa, "%sself_attn.", pre);
        snprintf(pm, sizeof pm, "%smlp.", pre);
        lm_layer *y = &q->ll[i];
        const int64_t D = c->head_dim;
        st = attn__llama_attn_reg(ctx, m, pa, c, y->attn);
        if (!st && c->qk_norm) /* Gemma's norm weights are held as 1 + w: 1 is their start */
            st = attn__param_reg(ctx, m, pa, "q_norm.weight", &y->qn, 1.0f, 1, D, 0, 0);
        if (!st && c->qk_norm)
            st = attn__param_reg(ctx, m, pa, "k_norm.weight", &y->kn, 1.0f, 1, D, 0, 0);
        if (!st)
            st = attn__llama_mlp_reg(ctx, m, pm, c, y->mlp);
        if (!st)
            st = attn__param_reg(ctx, m, pre, "input_layernorm.weight", &y->ln1, 1.0f, 1, E, 0, 0);
        if (!st && !c->sandwich_norm)
            st = attn__param_reg(ctx, m, pre, "post_attention_layernorm.weight", &y->ln2, 1.0f, 1,
                                 E, 0, 0);
        if (!st && c->sandwich_norm) {
            st = attn__param_reg(ctx, m, pre, "post_attention_layernorm.weight", &y->pa, 1.0f, 1, E,
                                 0, 0);
            if (!st)
                st = attn__param_reg(ctx, m, pre, "pre_feedforward_layernorm.weight", &y->ln2, 1.0f,
                                     1, E, 0, 0);
            if (!st)
                st = attn__param_reg(ctx, m, pre, "post_feedforward_layernorm.weight", &y->pf, 1.0f,
                                     1, E, 0, 0);
        }
        if (i == 0) q->lay_len = m->numel - q->lay_at;
    }
    if (!st) st = attn__param_reg(ctx, m, "", "model.norm.weight", &q->norm, 1.0f, 1, E, 0, 0);
    if (!st && !c->tie_word_embeddings) st = attn__lin_reg(ctx, m, "", "lm_head", &q->head, E, V, 0);
    /* HF's _init_weights: N(0, initializer_range^2) for every matrix and the embedding, zero
     * biases, norm weights 1 (their create-time value) */
    for (size_t i = 0; i < m->nparams && !st; i++) {
        attn__param *p = &m->params[i];
        const size_t n = strlen(p->name);
        if (p->ndim == 2) p->init_kind = ATTN__INIT_NORMAL, p->init_a = 0.02f;
        else if (n > 5 && !strcmp(p->name + n - 5, ".bias")) p->init_kind = ATTN__INIT_CONST;
    }
    return attn__module_done(ctx, m, st, out);
}

/* The module's F32 place of the model's entry (layer, kind) (llm_model.h). */
static float *lm_slot(lm *q, int64_t layer, int kind) {
    if (layer < 0) return kind == 0 ? q->embed : kind == 1 ? q->norm : q->head.weight;
    lm_layer *l = &q->ll[layer];
    switch (kind) {
    case ATTN__LT_Q: case ATTN__LT_K: case ATTN__LT_V: case ATTN__LT_O:
        return l->attn[kind - ATTN__LT_Q].weight;
    case ATTN__LT_GATE: case ATTN__LT_UP: case ATTN__LT_DOWN:
        return l->mlp[kind - ATTN__LT_GATE].weight;
    case ATTN__LT_LN1: return l->ln1;
    case ATTN__LT_LN2: return l->ln2;
    case ATTN__LT_QN: return l->qn;
    case ATTN__LT_KN: return l->kn;
    case ATTN__LT_PA: return l->pa;
    case ATTN__LT_PF: return l->pf;
    case ATTN__LT_QB: case ATTN__LT_KB: case ATTN__LT_VB: case ATTN__LT_OB:
        return l->attn[kind - ATTN__LT_QB].bias;
    default: return l->mlp[kind - ATTN__LT_GB].bias;
    }
}

/* The model's current weight of entry (layer, kind) as an attn__weight (vectors: F32). */
static attn__weight cur_weight(const attn_llm *s, int64_t layer, int kind, int64_t n) {
    if (layer < 0) {
        if (kind == 0) return s->embed;
        if (kind == 2) return s->lm_head;
        return attn__weight_f32(s->norm, NULL, n, 1);
    }
    const attn__block *b = &s->layers[layer];
    const attn__weight *w[7] = {&b->at[0].q, &b->at[0].k, &b->at[0].v, &b->at[0].o,
                               &b->mlp.gate, &b->mlp.up, &b->mlp.down};
    if (kind <= ATTN__LT_DOWN) return *w[kind];
    if (kind == ATTN__LT_LN1) return attn__weight_f32(b->norm[ATTN__SUB_SELF].weight, NULL, n, 1);
    if (kind == ATTN__LT_LN2) return attn__weight_f32(b->norm[ATTN__SUB_FFN].weight, NULL, n, 1);
    if (kind == ATTN__LT_QN) return attn__weight_f32(b->at[0].q_norm, NULL, n, 1);
    if (kind == ATTN__LT_KN) return attn__weight_f32(b->at[0].k_norm, NULL, n, 1);
    if (kind == ATTN__LT_PA) return attn__weight_f32(b->post[ATTN__SUB_SELF].weight, NULL, n, 1);
    if (kind == ATTN__LT_PF) return attn__weight_f32(b->post[ATTN__SUB_FFN].weight, NULL, n, 1);
    return attn__weight_f32(w[kind - ATTN__LT_QB]->bias, NULL, n, 1);
}

/* Gives m its parameters: with copy, its current weights first copied (or dequantized) into
 * them; then every weight of m bound to its parameter (each layer keeping its RoPE layout), and
 * the old weights' memory released. */
static attn_status lm_attach(attn_ctx *ctx, attn_llm *m, int copy) {
    const attn_llm_config *c = &m->cfg;
    attn_module *mod;
    ATTN_TRY(lm_params(ctx, c, &mod));
    lm *q = mod->impl;
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        int64_t layer, rows, cols;
        int kind;
        if (!attn__llm_entry(c, i, &layer, &kind, &rows, &cols)) continue;
        float *dst = lm_slot(q, layer, kind);
        if (copy) {
            const attn__weight w = cur_weight(m, layer, kind, rows);
            const int64_t n = rows * (cols ? cols : 1);
            if (w.type == ATTN_Q_F32) memcpy(dst, w.data, (size_t)n * sizeof(float));
            else attn__dequantize(ctx, w.type, w.data, n, dst);
        }
        attn__llm_bind(m, i, ATTN_Q_F32, dst,
                       layer >= 0 ? m->layers[layer].at[0].rope_interleaved : 0);
    }
    attn__llm_release_store(m);
    q->llm = m;
    mod->owner = m;
    m->mod = mod;
    return ATTN_OK;
}

attn_status attn_llm_create(attn_ctx *ctx, const attn_llm_config *cfg, attn_llm **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!cfg || !out, ctx, ATTN_E_INVALID, "attn_llm_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(cfg->rope_scaling == 3, ctx, ATTN_E_UNSUPPORTED,
                 "attn_llm_create: rope_scaling 3 (a file's own RoPE divisors) belongs to a "
                 "loaded model; a new one takes 1 (linear) or 2 (llama3)");
    attn_llm *m;
    ATTN_TRY(attn__llm_new(ctx, cfg, "attn_llm_create", &m));
    attn_status st = lm_attach(ctx, m, 0);
    if (!st) st = attn__llm_ready(ctx, m);
    if (st) {
        attn_llm_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

attn_status attn_llm_make_trainable(attn_ctx *ctx, attn_llm *m, unsigned flags) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_llm_make_trainable: the model is NULL");
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_LLM_DEQUANTIZE, ctx, ATTN_E_INVALID,
                 "attn_llm_make_trainable: unknown flags 0x%x",
                 flags & ~(unsigned)ATTN_LLM_DEQUANTIZE);
    if (m->mod) return ATTN_OK;
    ATTN_TRY(attn__llm_need_weights(ctx, m, "attn_llm_make_trainable"));
    ATTN_FAIL_IF(m->cfg.rope_scaling == 3, ctx, ATTN_E_UNSUPPORTED,
                 "attn_llm_make_trainable: the model's RoPE frequencies are divided by the "
                 "file's own factors (rope_freqs.weight); training takes HF's rope_scaling (a "
                 "folder) only");
    const attn_llm_config *c = &m->cfg;
    /* every weight's type first: nothing changes for a model that cannot be trained */
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        int64_t layer, rows, cols;
        int kind;
        if (!attn__llm_entry(c, i, &layer, &kind, &rows, &cols) || !cols) continue;
        const attn__weight w = cur_weight(m, layer, kind, rows);
        if (w.type == ATTN_Q_F32 || (flags & ATTN_LLM_DEQUANTIZE)) continue;
        char name[64];
        if (layer < 0) snprintf(name, sizeof name, "%s", kind ? "lm_head" : "embed_tokens");
        else snprintf(name, sizeof name, "layer %lld, tensor %d", (long long)layer, kind);
        return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                          "attn_llm_make_trainable: the model's weights are %s (%s): quantized "
                          "and 16-bit weights are for inference only; training needs F32 master "
                          "weights (pass ATTN_LLM_DEQUANTIZE to dequantize them)",
                          attn_qtype_name(w.type) ? attn_qtype_name(w.type) : "(unknown)", name);
    }
    return lm_attach(ctx, m, 1);
}

attn_module *attn_llm_module(attn_llm *m) { return m ? m->mod : NULL; }

attn_status attn_llama_set_rope_interleaved(attn_ctx *ctx, attn_module *m, int interleaved) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_llama_set_rope_interleaved: module is NULL");
    switch (m->kind) {
    case ATTN__LLAMA_ATTN: attn__llama_attn_mod_interleave(m, interleaved); return ATTN_OK;
    case ATTN__LLAMA_LAYER: attn__llama_layer_mod_interleave(m, interleaved); return ATTN_OK;
    case ATTN__LLM: {
        const attn_llm *llm = ((const lm *)m->impl)->llm;
        for (int64_t i = 0; i < llm->cfg.num_layers; i++)
            llm->layers[i].at[0].rope_interleaved = interleaved != 0;
        return ATTN_OK;
    }
    default:
        return attn__fail(ctx, ATTN_E_INVALID, "attn_llama_set_rope_interleaved: a %s module has "
                          "no RoPE (llama_attention, llama_layer or an attn_llm's)",
                          attn_module_kind(m));
    }
}

/* ---- forward and its record ---------------------------------------------------------------- */
/* The trainable model's parts: its module and the module's impl; ATTN_E_INVALID naming fn for
 * a model that is not trainable. */
static attn_status lm_of(attn_ctx *ctx, const attn_llm *m, const char *fn, const lm **q) {
    ATTN_FAIL_IF(!m->mod, ctx, ATTN_E_INVALID,
                 "%s: the model is not trainable (attn_llm_create, or attn_llm_make_trainable "
                 "on a loaded one)", fn);
    *q = m->mod->impl;
    return ATTN_OK;
}

/* What the backward reads: the ids and the one forward's record (attn__llm_rec, llm_model.h:
 * each layer's input and, unless checkpointed, its record). */
typedef struct lm_rec {
    int64_t B, T;
    int32_t *ids;
    attn__llm_rec r;
} lm_rec;

/* The recorded forward of ids [B, T] (checked) into rec (buffers from t; NULL: the caller's
 * workspace frame), then the logits [B T, V] when logits is not NULL. */
static attn_status lm_fwd(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                          int64_t T, attn__tape *t, int ckpt, lm_rec *rec, float *logits) {
    const attn_llm_config *c = &m->cfg;
    const int64_t L = c->num_layers, E = c->hidden_size, h = c->head_dim / 2, M = B * T;
    float *cs, *sn, *lcs = NULL, *lsn = NULL, *xs;
    int32_t *id;
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)M, sizeof *id, (void **)&id));
    memcpy(id, ids, (size_t)M * sizeof *id);
    ATTN_TRY(attn__rec_f32(ctx, t, &cs, M, h, 1, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sn, M, h, 1, 1));
    if (m->inv_freq_local) {
        ATTN_TRY(attn__rec_f32(ctx, t, &lcs, M, h, 1, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &lsn, M, h, 1, 1));
    }
    ATTN_TRY(attn__rec_f32(ctx, t, &xs, L + 1, M, E, 1));
    rec->B = B, rec->T = T, rec->ids = id;
    rec->r.xs = xs, rec->r.rope = (attn__rope_cs){cs, sn, lcs, lsn}, rec->r.ls = NULL;
    if (!ckpt) {
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)L, sizeof *rec->r.ls, (void **)&rec->r.ls));
        for (int64_t l = 0; l < L; l++)
            ATTN_TRY(attn__block_saved_alloc(ctx, t, &m->layers[l], B, T, 0, &rec->r.ls[l]));
    }
    return attn__llm_run(ctx, m, id, B, T, NULL, 0, logits, &rec->r);
}

/* logits (or dlogits, an input: finite) [B, T, V] apart from the parameters and, for the
 * logits, the ids. */
static attn_status lm_logits_arg(attn_ctx *ctx, const attn_llm *m, const char *what, int64_t B,
                                 int64_t T, const float *p, const int32_t *ids, int input,
                                 const char *fn) {
    ATTN_FAIL_IF(!p, ctx, ATTN_E_INVALID, "%s: %s is NULL", fn, what);
    const int64_t shape[3] = {B, T, m->cfg.vocab_size};
    attn_tensor x = attn_tensor_make((void *)p, ATTN_F32, 3, shape);
    if (input) return attn__check_finite(ctx, &x, what, 0);
    const int64_t ns[2] = {B, T};
    attn_tensor P = attn_view1(m->mod->arena, m->mod->numel),
                I = attn_tensor_make((void *)ids, ATTN_I32, 2, ns);
    attn__arg oa[] = {{&x, what, 0}}, ia[] = {{&I, "ids", 0}, {&P, "the model's parameters", 0}};
    return attn__check_outputs(ctx, fn, oa, 1, ia, 2);
}

/* ---- backward ------------------------------------------------------------------------------ */
typedef struct scatter_job {
    const int32_t *ids;
    const float *d;
    float *g;
    int64_t M, E;
} scatter_job;

enum { SCATTER_COLS = 64 };

/* g[ids[i], e] += d[i, e] for the columns of a block, rows in order: any thread split gives
 * the same bits */
static void scatter_task(void *arg, int64_t c0, int64_t c1, int tid) {
    const scatter_job *j = arg;
    (void)tid;
    const int64_t e0 = c0 * SCATTER_COLS, e1 = c1 * SCATTER_COLS < j->E ? c1 * SCATTER_COLS : j->E;
    for (int64_t i = 0; i < j->M; i++) {
        float *gr = j->g + (int64_t)j->ids[i] * j->E;
        const float *dr = j->d + i * j->E;
        for (int64_t e = e0; e < e1; e++) gr[e] += dr[e];
    }
}

/* dl [M, V] contiguous: the head, the final norm, every layer from the last, the embedding. */
static attn_status lm_bwd(attn_ctx *ctx, const lm *q, const attn__gmap *g, const lm_rec *rec,
                          const float *dl) {
    const attn_llm *m = q->llm;
    const attn_llm_config *c = &m->cfg;
    const int64_t L = c->num_layers, E = c->hidden_size, V = c->vocab_size, B = rec->B,
                  T = rec->T, M = B * T;
    const float eps = (float)c->rms_norm_eps;
    ATTN_TRY(attn__weight_trainable(ctx, &m->lm_head, "lm_head"));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *n, *d, *d2;
    ATTN_TRYG(attn__ws_f32(ctx, &n, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d2, M, E, 1, 1));
    const float *xl = rec->r.xs + L * M * E;
    attn__rms_norm(ctx, xl, E, q->norm, eps, n, E, M, E);
    /* logits = n Wh^T: dn = dl Wh (into d2), dWh += dl^T n (the embedding's when tied) */
    ATTN_TRYG(attn__matmul_bwd(ctx, &m->lm_head, n, E, dl, V, d2, E, 0, NULL,
                               attn__g(g, m->lm_head.data), NULL, M));
    if (!c->tie_word_embeddings) /* the head's gradient is final (tied: the embedding's is not) */
        attn__grad_ready(ctx, q->head.weight - g->arena, V * E);
    ATTN_TRYG(attn__rms_norm_bwd(ctx, xl, E, q->norm, eps, d2, E, d, E, attn__g(g, q->norm), M,
                                 E));
    attn__grad_ready(ctx, q->norm - g->arena, E);
    for (int64_t l = L - 1; l >= 0; l--) {
        attn__mark ml = attn__ws_mark(ctx);
        const float *x0 = rec->r.xs + l * M * E;
        const attn__block_io io = attn__block_io_causal(B, T, &rec->r.rope, NULL);
        attn__block_saved one;
        const attn__block_saved *r = rec->r.ls ? &rec->r.ls[l] : &one;
        if (!rec->r.ls) { /* checkpointed: this layer's forward again, recorded */
            float *o;
            st = attn__block_saved_alloc(ctx, NULL, &m->layers[l], B, T, 0, &one);
            if (!st) st = attn__ws_f32(ctx, &o, M, E, 1, 1);
            if (!st)
                st = attn__block_fwd(ctx, &m->layers[l], x0, o, &io, &one);
        } else {
            st = ATTN_OK;
        }
        if (!st)
            st = attn__block_bwd(ctx, &m->layers[l], g, r, &io, d, d2, NULL);
        attn__ws_release(ctx, ml);
        if (st) goto done;
        attn__grad_ready(ctx, q->lay_at + l * q->lay_len, q->lay_len);
        float *tmp = d;
        d = d2, d2 = tmp;
    }
    if (c->embed_scale != 0) { /* x = embed * sc: d embed = d x * sc */
        const float sc = (float)c->embed_scale;
        for (int64_t i = 0; i < M * E; i++)
            d[i] *= sc;
    }
    {
        scatter_job j = {rec->ids, d, attn__g(g, q->embed), M, E};
        attn__parallel_for(ctx, (E + SCATTER_COLS - 1) / SCATTER_COLS, scatter_task, &j);
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status lm_dlogits(attn_ctx *ctx, const attn_llm *m, const lm_rec *rec,
                              const float *dl, const char *fn) {
    return lm_logits_arg(ctx, m, "dlogits", rec->B, rec->T, dl, NULL, 1, fn);
}

attn_status attn_llm_forward_train(attn_ctx *ctx, const attn_llm *m, const int32_t *ids,
                                   int64_t B, int64_t T, float *logits, attn_saved *saved) {
    static const char fn[] = "attn_llm_forward_train";
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !ids || !saved, ctx, ATTN_E_INVALID, "%s: NULL argument", fn);
    attn__saved_begin(saved);
    const lm *q = NULL;
    ATTN_TRY(lm_of(ctx, m, fn, &q));
    ATTN_TRY(attn__llm_args(ctx, m, ids, B, T, fn));
    ATTN_TRY(lm_logits_arg(ctx, m, "logits", B, T, logits, ids, 0, fn));
    lm_rec *rec;
    ATTN_TRY(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *rec, (void **)&rec));
    ATTN_TRY(lm_fwd(ctx, m, ids, B, T, &saved->tape, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0,
                    rec, logits));
    attn__saved_end(saved, m->mod, rec);
    return ATTN_OK;
}

attn_status attn_llm_backward_saved(attn_ctx *ctx, const attn_llm *m, const attn_saved *saved,
                                    const float *dlogits) {
    static const char fn[] = "attn_llm_backward_saved";
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "%s: the model is NULL", fn);
    const lm *q = NULL;
    ATTN_TRY(lm_of(ctx, m, fn, &q));
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m->mod, &g));
    lm_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m->mod, fn, (void **)&rec));
    ATTN_TRY(lm_dlogits(ctx, m, rec, dlogits, fn));
    return lm_bwd(ctx, q, &g, rec, dlogits);
}

attn_status attn_llm_backward(attn_ctx *ctx, const attn_llm *m, const int32_t *ids, int64_t B,
                              int64_t T, const float *dlogits) {
    static const char fn[] = "attn_llm_backward";
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m || !ids, ctx, ATTN_E_INVALID, "%s: NULL argument", fn);
    const lm *q = NULL;
    ATTN_TRY(lm_of(ctx, m, fn, &q));
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m->mod, &g));
    ATTN_TRY(attn__llm_args(ctx, m, ids, B, T, fn));
    const lm_rec shape = {B, T, NULL, {0}};
    ATTN_TRY(lm_dlogits(ctx, m, &shape, dlogits, fn));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    lm_rec rec;
    /* the forward again, checkpointed (each layer's input) in the workspace */
    ATTN_TRYG(lm_fwd(ctx, m, ids, B, T, NULL, 1, &rec, NULL));
    ATTN_TRYG(lm_bwd(ctx, q, &g, &rec, dlogits));
done:
    attn__ws_release(ctx, mk);
    return st;
}
