/* A decoder-only GPT: token and learned position embeddings, a stack of causal pre- or
 * post-norm encoder layers with a final norm (layers/stack.c), and an LM head, untied or
 * tied to the token table (ATTN_GPT_TIED); forward, backward, training forward and saved
 * backward. */
#include <string.h>

#include "../layers/layers.h"

typedef struct gpt {
    attn__stack s;
    int64_t V, P;
    float *tok, *pos; /* [V, E], [P, E] */
    attn__lin lm_head; /* tied: its weight is tok (no parameter of its own) */
} gpt;

attn_status attn_gpt_create(attn_ctx *ctx, const attn_transformer_config *cfg,
                            int64_t vocab_size, int64_t max_positions, attn_module **out) {
    return attn_gpt_create_ex(ctx, cfg, vocab_size, max_positions, 0, out);
}

attn_status attn_gpt_create_ex(attn_ctx *ctx, const attn_transformer_config *cfg,
                               int64_t vocab_size, int64_t max_positions, unsigned flags,
                               attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(flags & ~(unsigned)ATTN_GPT_TIED, ctx, ATTN_E_INVALID,
                 "attn_gpt_create_ex: unknown flags 0x%x", flags & ~(unsigned)ATTN_GPT_TIED);
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    ATTN_FAIL_IF(vocab_size <= 0 || max_positions <= 0, ctx, ATTN_E_INVALID,
                 "vocab_size and max_positions must be positive");
    ATTN_FAIL_IF(cfg->num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a GPT needs at least one layer (num_encoder_layers)");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__GPT, sizeof(gpt), &m));
    gpt *g = m->impl;
    g->V = vocab_size;
    g->P = max_positions;
    int64_t E = cfg->d_model;
    attn_status st = attn__param_reg(ctx, m, "", "tok_emb.weight", &g->tok, 0, 2, vocab_size, E, 0);
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    if (st == ATTN_OK) {
        st = attn__param_reg(ctx, m, "", "pos_emb.weight", &g->pos, 0, 2, max_positions, E, 0);
        attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    }
    if (st == ATTN_OK)
        st = attn__stack_reg(ctx, m, &g->s, cfg, cfg->num_encoder_layers, 0, "layers.", "", "norm",
                                 NULL, 0, NULL);
    if (st == ATTN_OK && !(flags & ATTN_GPT_TIED))
        st = attn__lin_reg(ctx, m, "", "lm_head", &g->lm_head, E, vocab_size, 0);
    ATTN_TRY(attn__module_done(ctx, m, st, out));
    if (flags & ATTN_GPT_TIED) { /* the head reads the token table, in place */
        memset(&g->lm_head, 0, sizeof g->lm_head);
        g->lm_head.weight = g->tok, g->lm_head.in = E, g->lm_head.out = vocab_size;
    }
    return ATTN_OK;
}

attn_status attn_gpt_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                             const attn_run *run, attn_tensor *logits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_forward"));
    const gpt *g = m->impl;
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    int64_t B = ids->shape[0], T = ids->shape[1], E = g->s.cfg.d_model;
    ATTN_FAIL_IF(T > g->P, ctx, ATTN_E_SHAPE, "sequence length %lld exceeds max_positions %lld",
                 (long long)T, (long long)g->P);
    ATTN_TRY(attn__check(ctx, logits, "logits", ATTN_F32, 3, 3));
    int64_t shape[3] = {B, T, g->V};
    ATTN_TRY(attn__check_shape(ctx, logits, "logits", 3, shape));
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{logits, "logits", 0}},
                  ia[] = {{ids, "ids", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_gpt_forward", oa, 1, ia, 2));
    }
    attn__mark mk = attn__ws_mark(ctx);
    float *x, *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, T, g->V, 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t off = b * ids->stride[0] + t * ids->stride[1];
            int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                                : ((const int32_t *)ids->data)[off];
            if (id < 0 || id >= g->V) {
                st = attn__fail(ctx, ATTN_E_INVALID, "token id %lld out of range [0, %lld)",
                                (long long)id, (long long)g->V);
                goto done;
            }
            float *xr = x + (b * T + t) * E;
            for (int64_t e = 0; e < E; e++) xr[e] = g->tok[id * E + e] + g->pos[t * E + e];
        }
    attn__dropout(&rng, g->s.cfg.dropout, x, B * T * E);
    ATTN_TRYG(attn__enc_run(ctx, &g->s, x, B, T, NULL, NULL, 1, &rng));
    ATTN_TRYG(attn__lin_fwd(ctx, &g->lm_head, x, y, B * T));
    attn__store(y, logits);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- training forward and backward ---------------------------------------------------- */

/* Validates ids [B, T] against g (the forward's checks) and reads them into int64. */
static attn_status gpt_ids(attn_ctx *ctx, const gpt *g, const attn_tensor *ids, int64_t *B,
                           int64_t *T) {
    ATTN_FAIL_IF(!ids || !ids->data, ctx, ATTN_E_INVALID, "ids are missing");
    ATTN_FAIL_IF(ids->dtype != ATTN_I64 && ids->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "ids must be I32 or I64");
    ATTN_TRY(attn__check(ctx, ids, "ids", ids->dtype, 2, 2));
    *B = ids->shape[0], *T = ids->shape[1];
    ATTN_FAIL_IF(*T > g->P, ctx, ATTN_E_SHAPE, "sequence length %lld exceeds max_positions %lld",
                 (long long)*T, (long long)g->P);
    return ATTN_OK;
}

/* The record of a GPT forward. */
typedef struct gpt_rec {
    int64_t B, T;
    int64_t *ids;          /* [B*T] */
    attn__rng drop;        /* the stream at the embedding dropout */
    attn__stack_saved st;  /* st.out: the final norm's output, lm_head's input */
} gpt_rec;

/* Embeds ids (checked) and runs the stack, recording into rec (buffers from t, NULL: the
 * caller's workspace frame). */
static attn_status gpt_fwd_rec(attn_ctx *ctx, const gpt *gp, const attn_tensor *ids,
                               const attn_run *run, attn__tape *t, int ckpt, gpt_rec *rec) {
    int64_t B = 0, T = 0, E = gp->s.cfg.d_model;
    ATTN_TRY(gpt_ids(ctx, gp, ids, &B, &T));
    float *x;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    rec->B = B, rec->T = T;
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)(B * T), sizeof *rec->ids, (void **)&rec->ids));
    ATTN_TRY(attn__ws_f32(ctx, &x, B, T, E, 1)); /* copied by the stack's record */
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++) {
            int64_t off = b * ids->stride[0] + i * ids->stride[1];
            int64_t id = ids->dtype == ATTN_I64 ? ((const int64_t *)ids->data)[off]
                                                : ((const int32_t *)ids->data)[off];
            ATTN_FAIL_IF(id < 0 || id >= gp->V, ctx, ATTN_E_INVALID,
                         "token id %lld out of range [0, %lld)", (long long)id, (long long)gp->V);
            rec->ids[b * T + i] = id;
            float *xr = x + (b * T + i) * E;
            for (int64_t e = 0; e < E; e++) xr[e] = gp->tok[id * E + e] + gp->pos[i * E + e];
        }
    rec->drop = rng;
    attn__dropout(&rng, gp->s.cfg.dropout, x, B * T * E);
    return attn__stack_fwd_rec(ctx, &gp->s, 0, ckpt, t, x, NULL, B, T, 0, NULL, NULL, NULL, NULL,
                               1, &rng, &rec->st, NULL);
}

/* dl [B, T, V] contiguous: lm_head, the stack, the embedding dropout, the two tables. */
static attn_status gpt_bwd_rec(attn_ctx *ctx, const gpt *gp, const attn__gmap *g,
                               const gpt_rec *rec, const float *dl) {
    int64_t B = rec->B, T = rec->T, E = gp->s.cfg.d_model, V = gp->V, n = B * T * E;
    attn__mark mk = attn__ws_mark(ctx);
    float *dx, *d0;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dx, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d0, B, T, E, 1));
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(gp->lm_head.weight, NULL, V, E), rec->st.out, E, dl,
                               V, dx, E, 0, NULL, attn__g(g, gp->lm_head.weight), NULL, B * T));
    if (gp->lm_head.weight != gp->tok) /* untied: the head's gradient is final */
        attn__grad_ready(ctx, gp->lm_head.weight - g->arena, V * E);
    ATTN_TRYG(attn__stack_bwd_rec(ctx, &gp->s, g, &rec->st, dx, d0, NULL));
    attn__rng r = rec->drop;
    attn__dropout(&r, gp->s.cfg.dropout, d0, n);
    float *gtok = attn__g(g, gp->tok), *gpos = attn__g(g, gp->pos);
    for (int64_t i = 0; i < B * T; i++) {
        int64_t p = i % T;
        for (int64_t e = 0; e < E; e++) {
            gtok[rec->ids[i] * E + e] += d0[i * E + e];
            gpos[p * E + e] += d0[i * E + e];
        }
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* dlogits [B, T, V] checked against the record's sizes and made contiguous. */
static attn_status gpt_dlogits(attn_ctx *ctx, const gpt *gp, int64_t B, int64_t T,
                               const attn_tensor *dlogits, const float **dl) {
    ATTN_TRY(attn__check(ctx, dlogits, "dlogits", ATTN_F32, 3, 3));
    int64_t shape[3] = {B, T, gp->V};
    ATTN_TRY(attn__check_shape(ctx, dlogits, "dlogits", 3, shape));
    ATTN_TRY(attn__check_finite(ctx, dlogits, "dlogits", 0));
    return attn__contig(ctx, dlogits, dl);
}

attn_status attn_gpt_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                              const attn_run *run, const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_backward"));
    const gpt *gp = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, T = 0;
    ATTN_TRY(gpt_ids(ctx, gp, ids, &B, &T));
    attn__mark mk = attn__ws_mark(ctx);
    const float *dl;
    gpt_rec rec;
    attn_status st;
    ATTN_TRYG(gpt_dlogits(ctx, gp, B, T, dlogits, &dl));
    /* recompute: a checkpointed record (each layer's input) in the workspace */
    ATTN_TRYG(gpt_fwd_rec(ctx, gp, ids, run, NULL, 1, &rec));
    ATTN_TRYG(gpt_bwd_rec(ctx, gp, &g, &rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_gpt_forward_train(attn_ctx *ctx, const attn_module *m, const attn_tensor *ids,
                                   const attn_run *run, attn_tensor *logits, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_forward_train"));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    const gpt *gp = m->impl;
    int64_t B = 0, T = 0;
    ATTN_TRY(gpt_ids(ctx, gp, ids, &B, &T));
    ATTN_TRY(attn__check(ctx, logits, "logits", ATTN_F32, 3, 3));
    int64_t shape[3] = {B, T, gp->V};
    ATTN_TRY(attn__check_shape(ctx, logits, "logits", 3, shape));
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{logits, "logits", 0}},
                  ia[] = {{ids, "ids", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_gpt_forward_train", oa, 1, ia, 2));
    }
    attn__mark mk = attn__ws_mark(ctx);
    gpt_rec *rec;
    float *y;
    attn_status st;
    ATTN_TRYG(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(gpt_fwd_rec(ctx, gp, ids, run, &saved->tape,
                          (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, rec));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, T, gp->V, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &gp->lm_head, rec->st.out, y, B * T));
    attn__store(y, logits);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_gpt_backward_saved(attn_ctx *ctx, const attn_module *m,
                                    const attn_saved *saved, const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__GPT, "attn_gpt_backward_saved"));
    const gpt *gp = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    gpt_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_gpt_backward_saved", (void **)&rec));
    attn__mark mk = attn__ws_mark(ctx);
    const float *dl;
    attn_status st;
    ATTN_TRYG(gpt_dlogits(ctx, gp, rec->B, rec->T, dlogits, &dl));
    ATTN_TRYG(gpt_bwd_rec(ctx, gp, &g, rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}
