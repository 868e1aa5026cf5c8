/* The decoder-only causal LM as a trainable module (attn_llama_lm_*), for every family attn_llm
 * runs but a file's own RoPE divisors: HF's *ForCausalLM parameters by state_dict name in one F32
 * arena (the master weights of training), bound to the shared blocks (src/layers/llama_layer.c)
 * as F32 attn__weight weights, each layer configured as the loaded model's
 * (attn__llm_block_cfg: window, local RoPE table, QK-norm, sandwich norms, GEGLU); its forward
 * (the same bits as attn_llm_forward on the same weights), the training
 * forward that records what the backward reads (attn_saved, optionally checkpointed), the
 * backward to every parameter (tied head: both uses into the embedding's gradient), and a
 * trainable copy of a loaded attn_llm.  Also attn_llama_set_rope_interleaved for the three
 * Llama modules and this one. */
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

typedef struct lm {
    attn_llm_config c; /* resolved */
    float *embed, *norm;
    attn__lin head;          /* untied only (tied: the head is embed) */
    lm_layer *ll;            /* [L], in m->extra */
    attn__block *blk;  /* [L], in m->extra: the blocks over the parameters */
    float *inv_freq;         /* [D/2], in m->extra */
    float *inv_local;        /* [D/2] of the local layers (rope_theta_local), or NULL */
    attn__weight embed_w, head_w;
    attn_llm core;           /* the model as attn__llm_run sees it: a view of the above (no
                                text side, no store of its own) */
    int64_t lay_at, lay_len; /* arena offsets of layer i: [lay_at + i lay_len, + lay_len) */
} lm;

/* ---- construction -------------------------------------------------------------------------- */
static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

attn_status attn_llama_lm_create(attn_ctx *ctx, const attn_llm_config *cfg, attn_module **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!cfg || !out, ctx, ATTN_E_INVALID, "attn_llama_lm_create: NULL argument");
    *out = NULL;
    attn_llm_config c;
    ATTN_TRY(attn__llm_check(ctx, cfg, "attn_llama_lm_create", &c));
    ATTN_FAIL_IF(c.rope_scaling == 3, ctx, ATTN_E_UNSUPPORTED,
                 "attn_llama_lm_create: rope_scaling 3 (a file's own RoPE divisors) belongs to a "
                 "loaded model; a trainable one takes 1 (linear) or 2 (llama3)");
    const int64_t L = c.num_layers, E = c.hidden_size, V = c.vocab_size;
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__LLAMA_LM, sizeof(lm), &m));
    lm *q = m->impl;
    q->c = c;
    /* layers <= ATTN_LIMIT_LAYERS (checked): no overflow */
    const size_t o1 = up64((size_t)L * sizeof(lm_layer));
    const size_t o2 = o1 + up64((size_t)L * sizeof(attn__block));
    m->extra = attn__calloc(ctx, 1, o2 + (size_t)c.head_dim * sizeof(float));
    if (!m->extra) {
        attn_module_free(m);
        return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (attn_llama_lm, %lld layers)",
                          (long long)L);
    }
    q->ll = m->extra;
    q->blk = (attn__block *)((unsigned char *)m->extra + o1);
    q->inv_freq = (float *)((unsigned char *)m->extra + o2);
    if (c.sliding_window > 0 && c.rope_theta_local != 0)
        q->inv_local = q->inv_freq + c.head_dim / 2;
    /* HF's order of the state_dict */
    attn_status st =
        attn__param_reg(ctx, m, "", "model.embed_tokens.weight", &q->embed, 0.0f, 2, V, E, 0);
    q->lay_at = m->numel;
    for (int64_t i = 0; i < L && !st; i++) {
        char pre[64], pa[96], pm[96];
        snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)i);
        snprintf(pa, sizeof pa, "%sself_attn.", pre);
        snprintf(pm, sizeof pm, "%smlp.", pre);
        lm_layer *y = &q->ll[i];
        const int64_t D = c.head_dim;
        st = attn__llama_attn_reg(ctx, m, pa, &c, y->attn);
        if (!st && c.qk_norm) /* Gemma's norm weights are held as 1 + w: 1 is their start */
            st = attn__param_reg(ctx, m, pa, "q_norm.weight", &y->qn, 1.0f, 1, D, 0, 0);
        if (!st && c.qk_norm)
            st = attn__param_reg(ctx, m, pa, "k_norm.weight", &y->kn, 1.0f, 1, D, 0, 0);
        if (!st)
            st = attn__llama_mlp_reg(ctx, m, pm, &c, y->mlp);
        if (!st)
            st = attn__param_reg(ctx, m, pre, "input_layernorm.weight", &y->ln1, 1.0f, 1, E, 0, 0);
        if (!st && !c.sandwich_norm)
            st = attn__param_reg(ctx, m, pre, "post_attention_layernorm.weight", &y->ln2, 1.0f, 1,
                                 E, 0, 0);
        if (!st && c.sandwich_norm) {
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
    if (!st && !c.tie_word_embeddings) st = attn__lin_reg(ctx, m, "", "lm_head", &q->head, E, V, 0);
    /* HF's _init_weights: N(0, initializer_range^2) for every matrix and the embedding, zero
     * biases, norm weights 1 (their create-time value) */
    for (size_t i = 0; i < m->nparams && !st; i++) {
        attn__param *p = &m->params[i];
        const size_t n = strlen(p->name);
        if (p->ndim == 2) p->init_kind = ATTN__INIT_NORMAL, p->init_a = 0.02f;
        else if (n > 5 && !strcmp(p->name + n - 5, ".bias")) p->init_kind = ATTN__INIT_CONST;
    }
    ATTN_TRY(attn__module_done(ctx, m, st, out));
    for (int64_t i = 0; i < L; i++) {
        attn__block *b = &q->blk[i];
        const lm_layer *y = &q->ll[i];
        attn__llama_attn_bind(&b->at[0], &c, y->attn);
        attn__llama_mlp_bind(&b->mlp, y->mlp);
        attn__llm_block_cfg(&c, i, b);
        b->norm[ATTN__SUB_SELF].weight = y->ln1, b->norm[ATTN__SUB_FFN].weight = y->ln2;
        b->post[ATTN__SUB_SELF].weight = y->pa, b->post[ATTN__SUB_FFN].weight = y->pf;
        b->at[0].q_norm = y->qn, b->at[0].k_norm = y->kn;
    }
    q->embed_w = attn__weight_f32(q->embed, NULL, V, E);
    q->head_w = c.tie_word_embeddings ? q->embed_w : attn__weight_f32(q->head.weight, NULL, V, E);
    attn__llm_inv_freq(&c, NULL, q->inv_freq, q->inv_local);
    memset(&q->core, 0, sizeof q->core);
    q->core.cfg = c;
    q->core.embed = q->embed_w, q->core.lm_head = q->head_w, q->core.norm = q->norm;
    q->core.layers = q->blk, q->core.inv_freq = q->inv_freq, q->core.inv_freq_local = q->inv_local;
    q->core.bos = q->core.eos = q->core.eot = -1;
    return ATTN_OK;
}

attn_status attn_llama_lm_config(const attn_module *m, attn_llm_config *cfg) {
    if (!m || !cfg || m->kind != ATTN__LLAMA_LM) return ATTN_E_INVALID;
    *cfg = ((const lm *)m->impl)->c;
    return ATTN_OK;
}

/* The module's F32 destination of the model's entry (layer, kind) (llm_model.h). */
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
    case ATTN__LT_QN:
        return l->qn;
    case ATTN__LT_KN:
        return l->kn;
    case ATTN__LT_PA:
        return l->pa;
    case ATTN__LT_PF:
        return l->pf;
    case ATTN__LT_QB: case ATTN__LT_KB: case ATTN__LT_VB: case ATTN__LT_OB:
        return l->attn[kind - ATTN__LT_QB].bias;
    default: return l->mlp[kind - ATTN__LT_GB].bias;
    }
}

/* The source model's weight of entry (layer, kind) as an attn__weight (vectors: F32). */
static attn__weight src_weight(const attn_llm *s, int64_t layer, int kind, int64_t n) {
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
    if (kind == ATTN__LT_QN)
        return attn__weight_f32(b->at[0].q_norm, NULL, n, 1);
    if (kind == ATTN__LT_KN)
        return attn__weight_f32(b->at[0].k_norm, NULL, n, 1);
    if (kind == ATTN__LT_PA)
        return attn__weight_f32(b->post[ATTN__SUB_SELF].weight, NULL, n, 1);
    if (kind == ATTN__LT_PF)
        return attn__weight_f32(b->post[ATTN__SUB_FFN].weight, NULL, n, 1);
    return attn__weight_f32(w[kind - ATTN__LT_QB]->bias, NULL, n, 1);
}

attn_status attn_llama_lm_from_llm(attn_ctx *ctx, const attn_llm *src, unsigned flags,
                                   attn_module **out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!src || !out, ctx, ATTN_E_INVALID, "attn_llama_lm_from_llm: NULL argument");
    ATTN_TRY(attn__llm_need_weights(ctx, src, "attn_llama_lm_from_llm"));
    ATTN_FAIL_IF(src->cfg.rope_scaling == 3, ctx, ATTN_E_UNSUPPORTED,
                 "attn_llama_lm_from_llm: the model's RoPE frequencies are divided by the file's "
                 "own factors (rope_freqs.weight); training takes HF's rope_scaling (a folder) "
                 "only");
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_LLAMA_LM_DEQUANTIZE, ctx, ATTN_E_INVALID,
                 "attn_llama_lm_from_llm: unknown flags 0x%x",
                 flags & ~(unsigned)ATTN_LLAMA_LM_DEQUANTIZE);
    *out = NULL;
    const attn_llm_config *c = &src->cfg;
    /* every weight's type first: nothing is allocated for a source that cannot be trained */
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        int64_t layer, rows, cols;
        int kind;
        if (!attn__llm_entry(c, i, &layer, &kind, &rows, &cols) || !cols) continue;
        const attn__weight w = src_weight(src, layer, kind, rows);
        if (w.type == ATTN_Q_F32 || (flags & ATTN_LLAMA_LM_DEQUANTIZE)) continue;
        char name[64];
        if (layer < 0) snprintf(name, sizeof name, "%s", kind ? "lm_head" : "embed_tokens");
        else snprintf(name, sizeof name, "layer %lld, tensor %d", (long long)layer, kind);
        return attn__fail(ctx, ATTN_E_UNSUPPORTED,
                          "attn_llama_lm_from_llm: the model's weights are %s (%s): quantized "
                          "and 16-bit weights are for inference only; training needs F32 master "
                          "weights (pass ATTN_LLAMA_LM_DEQUANTIZE to dequantize them)",
                          attn_qtype_name(w.type) ? attn_qtype_name(w.type) : "(unknown)", name);
    }
    attn_module *m;
    ATTN_TRY(attn_llama_lm_create(ctx, c, &m));
    lm *q = m->impl;
    for (int64_t i = 0; i < attn__llm_entry_count(c); i++) {
        int64_t layer, rows, cols;
        int kind;
        if (!attn__llm_entry(c, i, &layer, &kind, &rows, &cols)) continue;
        const attn__weight w = src_weight(src, layer, kind, rows);
        float *dst = lm_slot(q, layer, kind);
        const int64_t n = rows * (cols ? cols : 1);
        if (w.type == ATTN_Q_F32) memcpy(dst, w.data, (size_t)n * sizeof(float));
        else attn__dequantize(ctx, w.type, w.data, n, dst);
    }
    for (int64_t i = 0; i < c->num_layers; i++)
        q->blk[i].at[0].rope_interleaved = src->layers[i].at[0].rope_interleaved;
    *out = m;
    return ATTN_OK;
}

attn_status attn_llama_set_rope_interleaved(attn_ctx *ctx, attn_module *m, int interleaved) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "attn_llama_set_rope_interleaved: module is NULL");
    switch (m->kind) {
    case ATTN__LLAMA_ATTN: attn__llama_attn_mod_interleave(m, interleaved); return ATTN_OK;
    case ATTN__LLAMA_LAYER: attn__llama_layer_mod_interleave(m, interleaved); return ATTN_OK;
    case ATTN__LLAMA_LM: {
        lm *q = m->impl;
        for (int64_t i = 0; i < q->c.num_layers; i++)
            q->blk[i].at[0].rope_interleaved = interleaved != 0;
        return ATTN_OK;
    }
    default:
        return attn__fail(ctx, ATTN_E_INVALID, "attn_llama_set_rope_interleaved: a %s module has "
                          "no RoPE (llama_attention, llama_layer or llama_lm)",
                          attn_module_kind(m));
    }
}

/* ---- arguments ----------------------------------------------------------------------------- */
/* ids [B, T] (I32/I64, each in [0, V), T <= max_position_embeddings) into out [B*T] (a buffer
 * from t; NULL: the workspace). */
static attn_status lm_ids(attn_ctx *ctx, const lm *q, const attn_tensor *ids, attn__tape *t,
                          int64_t *B, int64_t *T, int32_t **out) {
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    *B = ids->shape[0], *T = ids->shape[1];
    ATTN_FAIL_IF(*T > q->c.max_position_embeddings, ctx, ATTN_E_SHAPE,
                 "sequence length %lld is over max_position_embeddings %lld", (long long)*T,
                 (long long)q->c.max_position_embeddings);
    int64_t M, n;
    ATTN_FAIL_IF(!attn__mul_i64(*B, *T, &M) || !attn__mul_i64(M, q->c.vocab_size, &n) ||
                     !attn__mul_i64(M, q->c.hidden_size * (q->c.num_layers + 4), &n),
                 ctx, ATTN_E_OVERFLOW, "ids [%lld, %lld] are too many", (long long)*B,
                 (long long)*T);
    int32_t *p;
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)M, sizeof *p, (void **)&p));
    for (int64_t b = 0; b < *B; b++)
        for (int64_t i = 0; i < *T; i++) {
            const int64_t off = b * ids->stride[0] + i * ids->stride[1];
            const int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                                      : ((const int32_t *)ids->data)[off];
            ATTN_FAIL_IF(id < 0 || id >= q->c.vocab_size, ctx, ATTN_E_INVALID,
                         "token id %lld at [%lld, %lld] is out of range [0, %lld)",
                         (long long)id, (long long)b, (long long)i,
                         (long long)q->c.vocab_size);
            p[b * *T + i] = (int32_t)id;
        }
    *out = p;
    return ATTN_OK;
}

/* logits [B, T, V] of m (dlogits: an input, checked finite). */
static attn_status lm_logits_arg(attn_ctx *ctx, const attn_module *m, const char *what,
                                 int64_t B, int64_t T, const attn_tensor *t, int input) {
    const lm *q = m->impl;
    ATTN_TRY(attn__check(ctx, t, what, ATTN_F32, 3, 3));
    const int64_t shape[3] = {B, T, q->c.vocab_size};
    ATTN_TRY(attn__check_shape(ctx, t, what, 3, shape));
    if (input) return attn__check_finite(ctx, t, what, 0);
    return ATTN_OK;
}

/* ---- forward and its record ---------------------------------------------------------------- */
/* What the backward reads: the ids and the one forward's record (attn__llm_rec, llm_model.h:
 * each layer's input and, unless checkpointed, its record). */
typedef struct lm_rec {
    int64_t B, T;
    int32_t *ids;
    attn__llm_rec r;
} lm_rec;

/* The forward of ids (attn__llm_run on the module's view q->core) into rec (buffers from t,
 * NULL: the caller's workspace frame), then the logits [M, V] when logits is not NULL.  rec
 * NULL: inference (in place, nothing kept). */
static attn_status lm_fwd(attn_ctx *ctx, const lm *q, const attn_tensor *ids, attn__tape *t,
                          int ckpt, lm_rec *rec, float *logits, int64_t *pB, int64_t *pT) {
    const attn_llm_config *c = &q->c;
    const int64_t L = c->num_layers, E = c->hidden_size, h = c->head_dim / 2;
    int64_t B, T;
    int32_t *id;
    if (!rec) {
        attn__mark mk = attn__ws_mark(ctx);
        attn_status st = lm_ids(ctx, q, ids, NULL, &B, &T, &id);
        if (!st)
            *pB = B, *pT = T;
        if (!st)
            st = attn__llm_run(ctx, &q->core, id, B, T, NULL, 0, logits, NULL);
        attn__ws_release(ctx, mk);
        return st;
    }
    /* the kept buffers, from t (or from the caller's frame) */
    float *cs, *sn, *lcs = NULL, *lsn = NULL, *xs;
    ATTN_TRY(lm_ids(ctx, q, ids, t, &B, &T, &id));
    ATTN_TRY(attn__rec_f32(ctx, t, &cs, B * T, h, 1, 1));
    ATTN_TRY(attn__rec_f32(ctx, t, &sn, B * T, h, 1, 1));
    if (q->inv_local) {
        ATTN_TRY(attn__rec_f32(ctx, t, &lcs, B * T, h, 1, 1));
        ATTN_TRY(attn__rec_f32(ctx, t, &lsn, B * T, h, 1, 1));
    }
    ATTN_TRY(attn__rec_f32(ctx, t, &xs, L + 1, B * T, E, 1));
    rec->B = B, rec->T = T, rec->ids = id;
    rec->r.xs = xs, rec->r.rope = (attn__rope_cs){cs, sn, lcs, lsn}, rec->r.ls = NULL;
    if (!ckpt) {
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)L, sizeof *rec->r.ls, (void **)&rec->r.ls));
        for (int64_t l = 0; l < L; l++)
            ATTN_TRY(attn__block_saved_alloc(ctx, t, &q->blk[l], B, T, 0, &rec->r.ls[l]));
    }
    *pB = B, *pT = T;
    return attn__llm_run(ctx, &q->core, id, B, T, NULL, 0, logits, &rec->r);
}

/* The checks of the two forwards' arguments: ids [B, T], logits [B, T, V], no overlaps. */
static attn_status fwd_args(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                            attn_tensor *logits, const char *fn) {
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    ATTN_TRY(lm_logits_arg(ctx, m, "logits", ids->shape[0], ids->shape[1], logits, 0));
    attn_tensor P = attn_view1(m->arena, m->numel);
    attn__arg oa[] = {{logits, "logits", 0}},
              ia[] = {{ids, "ids", 0}, {&P, "the module's parameters", 0}};
    return attn__check_outputs(ctx, fn, oa, 1, ia, 2);
}

attn_status attn_llama_lm_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                                  attn_tensor *logits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LM, "attn_llama_lm_forward"));
    const lm *q = m->impl;
    ATTN_TRY(fwd_args(ctx, m, ids, logits, "attn_llama_lm_forward"));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *y;
    int64_t B, T;
    ATTN_TRYG(attn__ws_f32(ctx, &y, ids->shape[0] * ids->shape[1], q->c.vocab_size, 1, 1));
    ATTN_TRYG(lm_fwd(ctx, q, ids, NULL, 0, NULL, y, &B, &T));
    attn__store(y, logits);
done:
    attn__ws_release(ctx, mk);
    return st;
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
    const attn_llm_config *c = &q->c;
    const int64_t L = c->num_layers, E = c->hidden_size, V = c->vocab_size, B = rec->B,
                  T = rec->T, M = B * T;
    const float eps = (float)c->rms_norm_eps;
    ATTN_TRY(attn__weight_trainable(ctx, &q->head_w, "lm_head"));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    float *n, *d, *d2;
    ATTN_TRYG(attn__ws_f32(ctx, &n, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d2, M, E, 1, 1));
    const float *xl = rec->r.xs + L * M * E;
    attn__rms_norm(ctx, xl, E, q->norm, eps, n, E, M, E);
    /* logits = n Wh^T: dn = dl Wh (into d2), dWh += dl^T n (the embedding's when tied) */
    ATTN_TRYG(attn__matmul_bwd(ctx, &q->head_w, n, E, dl, V, d2, E, 0, NULL,
                               attn__g(g, q->head_w.data), NULL, M));
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
            st = attn__block_saved_alloc(ctx, NULL, &q->blk[l], B, T, 0, &one);
            if (!st) st = attn__ws_f32(ctx, &o, M, E, 1, 1);
            if (!st)
                st = attn__block_fwd(ctx, &q->blk[l], x0, o, &io, &one);
        } else {
            st = ATTN_OK;
        }
        if (!st)
            st = attn__block_bwd(ctx, &q->blk[l], g, r, &io, d, d2, NULL);
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

static attn_status lm_dlogits(attn_ctx *ctx, const attn_module *m, int64_t B, int64_t T,
                              const attn_tensor *dlogits, const float **dl) {
    ATTN_TRY(lm_logits_arg(ctx, m, "dlogits", B, T, dlogits, 1));
    return attn__contig(ctx, dlogits, dl);
}

attn_status attn_llama_lm_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                                   const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LM, "attn_llama_lm_backward"));
    const lm *q = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *dl;
    lm_rec rec;
    int64_t B, T;
    ATTN_TRYG(lm_dlogits(ctx, m, ids->shape[0], ids->shape[1], dlogits, &dl));
    /* the forward again, checkpointed (each layer's input) in the workspace */
    ATTN_TRYG(lm_fwd(ctx, q, ids, NULL, 1, &rec, NULL, &B, &T));
    ATTN_TRYG(lm_bwd(ctx, q, &g, &rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_llama_lm_forward_train(attn_ctx *ctx, const attn_module *m,
                                        const attn_tensor *ids, attn_tensor *logits,
                                        attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LM, "attn_llama_lm_forward_train"));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "attn_llama_lm_forward_train: saved is NULL");
    attn__saved_begin(saved);
    const lm *q = m->impl;
    ATTN_TRY(fwd_args(ctx, m, ids, logits, "attn_llama_lm_forward_train"));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    lm_rec *rec;
    float *y;
    int64_t B, T;
    ATTN_TRYG(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(attn__ws_f32(ctx, &y, ids->shape[0] * ids->shape[1], q->c.vocab_size, 1, 1));
    ATTN_TRYG(lm_fwd(ctx, q, ids, &saved->tape, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, rec,
                     y, &B, &T));
    attn__store(y, logits);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_llama_lm_backward_saved(attn_ctx *ctx, const attn_module *m,
                                         const attn_saved *saved, const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__LLAMA_LM, "attn_llama_lm_backward_saved"));
    const lm *q = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    lm_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_llama_lm_backward_saved", (void **)&rec));
    attn__mark mk = attn__ws_mark(ctx);
    attn_status st;
    const float *dl;
    ATTN_TRYG(lm_dlogits(ctx, m, rec->B, rec->T, dlogits, &dl));
    ATTN_TRYG(lm_bwd(ctx, q, &g, rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}
