/* Encoder-decoder translator: token embeddings * sqrt(E) + sinusoidal positions, dropout,
 * nn.Transformer, generator (see attn_seq2seq_create in attn.h). */
#include <math.h>
#include <string.h>

#include "../layers/layers.h"

typedef struct seq2seq {
    attn__stack s; /* first: the transformer's stacks (module kind helpers expect it) */
    attn_seq2seq_config cfg;
    float *src_emb, *tgt_emb; /* [Vs, E], [Vt, E] */
    attn__lin gen;            /* [Vt, E] */
    float *pe;                /* [max_len, E] sinusoidal table, in m->extra after the layers */
} seq2seq;

attn_status attn_seq2seq_create(attn_ctx *ctx, const attn_seq2seq_config *cfg,
                                attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "attn_seq2seq_create: NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(!cfg, ctx, ATTN_E_INVALID, "config is NULL");
    ATTN_TRY(attn__check_tcfg(ctx, &cfg->tf));
    ATTN_FAIL_IF(cfg->tf.num_encoder_layers < 1 || cfg->tf.num_decoder_layers < 1, ctx,
                 ATTN_E_INVALID, "a translator needs at least one encoder and decoder layer");
    ATTN_FAIL_IF(cfg->src_vocab <= 0 || cfg->tgt_vocab <= 0 || cfg->max_len <= 0 ||
                     cfg->max_len > (1 << 20),
                 ctx, ATTN_E_INVALID, "vocabulary sizes and max_len must be positive");
    ATTN_FAIL_IF(cfg->pad_id < 0 || cfg->pad_id >= cfg->src_vocab || cfg->pad_id >= cfg->tgt_vocab,
                 ctx, ATTN_E_INVALID, "pad_id %lld is not in both vocabularies",
                 (long long)cfg->pad_id);
    int64_t E = cfg->tf.d_model;
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__SEQ2SEQ, sizeof(seq2seq), &m));
    seq2seq *q = m->impl;
    q->cfg = *cfg;
    attn_status st = attn__param_reg(ctx, m, "", "src_emb.weight", &q->src_emb, 0, 2,
                                     cfg->src_vocab, E, 0);
    /* N(0, 1/E): after the sqrt(E) scale the embeddings are N(0, 1), the size of the
     * sinusoidal positions, which N(0, 1) (nn.Embedding's default) would drown */
    attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
    if (st == ATTN_OK) {
        st = attn__param_reg(ctx, m, "", "tgt_emb.weight", &q->tgt_emb, 0, 2, cfg->tgt_vocab, E, 0);
        attn__param_init_last(m, ATTN__INIT_NORMAL, 1.0 / sqrt((double)E));
    }
    size_t first = m->nparams;
    void *tail = NULL;
    size_t pe_bytes = 0;
    if (!attn__mul_size((size_t)cfg->max_len, (size_t)E, &pe_bytes) ||
        !attn__mul_size(pe_bytes, sizeof(float), &pe_bytes))
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "positional table max_len %lld x d_model %lld is "
                        "too large", (long long)cfg->max_len, (long long)E);
    if (st == ATTN_OK)
        st = attn__stack_reg(ctx, m, &q->s, &cfg->tf, cfg->tf.num_encoder_layers,
                             cfg->tf.num_decoder_layers, "transformer.encoder.layers.",
                             "transformer.decoder.layers.", "transformer.encoder.norm",
                             "transformer.decoder.norm", pe_bytes, &tail);
    /* nn.Transformer._reset_parameters: xavier_uniform_ on its matrices */
    for (size_t i = first; st == ATTN_OK && i < m->nparams; i++) {
        attn__param *p = &m->params[i];
        if (p->ndim > 1) {
            p->init_kind = ATTN__INIT_UNIFORM;
            p->init_a = (float)attn__xavier_bound(p->shape[1], p->shape[0]);
        }
    }
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "generator", &q->gen, E, cfg->tgt_vocab, 1);
    if (st == ATTN_OK) { /* the sinusoidal table, after the layers in m->extra */
        q->pe = tail;
        for (int64_t pos = 0; pos < cfg->max_len; pos++)
            for (int64_t e = 0; e < E; e++) {
                double ang = (double)pos / pow(10000.0, (double)(e & ~(int64_t)1) / (double)E);
                q->pe[pos * E + e] = (float)((e & 1) ? cos(ang) : sin(ang));
            }
    }
    return attn__module_done(ctx, m, st, out);
}

/* Reads ids [B, L] into int64 and builds the padding mask (1 = pad), both in tp (NULL: the
 * workspace). */
static attn_status read_ids(attn_ctx *ctx, attn__tape *tp, const attn_tensor *t,
                            const char *what, int64_t V, int64_t pad, int64_t maxlen,
                            int64_t **ids, unsigned char **padm) {
    ATTN_FAIL_IF(!t || !t->data, ctx, ATTN_E_INVALID, "%s is missing", what);
    ATTN_FAIL_IF(t->dtype != ATTN_I64 && t->dtype != ATTN_I32, ctx, ATTN_E_DTYPE,
                 "%s must be I32 or I64 token ids", what);
    ATTN_TRY(attn__check(ctx, t, what, t->dtype, 2, 2));
    int64_t B = t->shape[0], L = t->shape[1];
    ATTN_FAIL_IF(L > maxlen, ctx, ATTN_E_SHAPE, "%s has length %lld, max_len is %lld", what,
                 (long long)L, (long long)maxlen);
    ATTN_TRY(attn__rec_alloc(ctx, tp, (size_t)(B * L), sizeof **ids, (void **)ids));
    ATTN_TRY(attn__rec_alloc(ctx, tp, (size_t)(B * L), 1, (void **)padm));
    for (int64_t b = 0; b < B; b++)
        for (int64_t l = 0; l < L; l++) {
            int64_t off = b * t->stride[0] + l * t->stride[1];
            int64_t id = t->dtype == ATTN_I64 ? ((const int64_t *)t->data)[off]
                                              : ((const int32_t *)t->data)[off];
            ATTN_FAIL_IF(id < 0 || id >= V, ctx, ATTN_E_INVALID,
                         "%s: token id %lld out of range [0, %lld)", what, (long long)id,
                         (long long)V);
            (*ids)[b * L + l] = id;
            (*padm)[b * L + l] = id == pad;
        }
    return ATTN_OK;
}

/* x [B, L, E] = emb[ids] * sqrt(E) + pe[:L] */
static void embed(const seq2seq *q, const float *emb, const int64_t *ids, int64_t B, int64_t L,
                  float *x) {
    int64_t E = q->cfg.tf.d_model;
    float sc = (float)sqrt((double)E);
    for (int64_t r = 0; r < B * L; r++) {
        const float *er = emb + ids[r] * E, *pr = q->pe + (r % L) * E;
        for (int64_t e = 0; e < E; e++) x[r * E + e] = er[e] * sc + pr[e];
    }
}

/* Everything a forward or backward needs about one batch. */
typedef struct batch {
    int64_t B, S, T, E;
    int64_t *sid, *tid;
    unsigned char *spad, *tpad;
    attn_mask skpm, tkpm;
} batch;

static attn_status prepare(attn_ctx *ctx, attn__tape *tp, const seq2seq *q,
                           const attn_tensor *src, const attn_tensor *tgt, batch *bt) {
    const attn_seq2seq_config *c = &q->cfg;
    memset(bt, 0, sizeof *bt);
    ATTN_TRY(read_ids(ctx, tp, src, "src", c->src_vocab, c->pad_id, c->max_len, &bt->sid,
                      &bt->spad));
    bt->B = src->shape[0], bt->S = src->shape[1], bt->E = c->tf.d_model;
    if (tgt) {
        ATTN_TRY(read_ids(ctx, tp, tgt, "tgt", c->tgt_vocab, c->pad_id, c->max_len, &bt->tid,
                          &bt->tpad));
        ATTN_FAIL_IF(tgt->shape[0] != bt->B, ctx, ATTN_E_SHAPE,
                     "tgt has batch %lld, src has %lld", (long long)tgt->shape[0],
                     (long long)bt->B);
        bt->T = tgt->shape[1];
        int64_t ts[2] = {bt->B, bt->T};
        bt->tkpm.kind = ATTN_MASK_BLOCK;
        bt->tkpm.t = attn_tensor_make(bt->tpad, ATTN_BOOL, 2, ts);
    }
    int64_t ss[2] = {bt->B, bt->S};
    bt->skpm.kind = ATTN_MASK_BLOCK;
    bt->skpm.t = attn_tensor_make(bt->spad, ATTN_BOOL, 2, ss);
    return ATTN_OK;
}

/* Forward to the decoder output xo [B, T, E]; keeps the embedded inputs s0, t0 and memory. */
static attn_status run_fwd(attn_ctx *ctx, const seq2seq *q, const batch *bt, attn__rng *rng,
                           float *s0, float *t0, float *mem, float *xo, float *cross) {
    int64_t B = bt->B, S = bt->S, T = bt->T, E = bt->E;
    float p = q->cfg.tf.dropout;
    embed(q, q->src_emb, bt->sid, B, S, s0);
    attn__dropout(rng, p, s0, B * S * E);
    embed(q, q->tgt_emb, bt->tid, B, T, t0);
    attn__dropout(rng, p, t0, B * T * E);
    memcpy(mem, s0, (size_t)(B * S * E) * sizeof(float));
    ATTN_TRY(attn__enc_run(ctx, &q->s, mem, B, S, NULL, &bt->skpm, 0, rng));
    memcpy(xo, t0, (size_t)(B * T * E) * sizeof(float));
    return attn__dec_run(ctx, &q->s, xo, mem, B, T, S, NULL, NULL, &bt->tkpm, &bt->skpm, 1, rng,
                         cross);
}

attn_status attn_seq2seq_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                 const attn_tensor *tgt, const attn_run *run,
                                 attn_tensor *logits, attn_tensor *cross) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEQ2SEQ, "attn_seq2seq_forward"));
    const seq2seq *q = m->impl;
    attn__mark mk = attn__ws_mark(ctx);
    batch bt;
    float *s0, *t0, *mem, *xo, *y, *cw = NULL;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(prepare(ctx, NULL, q, src, tgt, &bt));
    rng.nb = bt.B;
    int64_t V = q->cfg.tgt_vocab;
    ATTN_TRYG(attn__check(ctx, logits, "logits", ATTN_F32, 3, 3));
    {
        int64_t ls[3] = {bt.B, bt.T, V}, cs[3] = {bt.B, bt.T, bt.S};
        ATTN_TRYG(attn__check_shape(ctx, logits, "logits", 3, ls));
        if (cross && cross->data) {
            ATTN_TRYG(attn__check(ctx, cross, "cross", ATTN_F32, 3, 3));
            ATTN_TRYG(attn__check_shape(ctx, cross, "cross", 3, cs));
            ATTN_TRYG(attn__ws_f32(ctx, &cw, bt.B, bt.T, bt.S, 1));
        }
    }
    ATTN_TRYG(attn__ws_f32(ctx, &s0, bt.B, bt.S, bt.E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &mem, bt.B, bt.S, bt.E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t0, bt.B, bt.T, bt.E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &xo, bt.B, bt.T, bt.E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, bt.B, bt.T, V, 1));
    ATTN_TRYG(run_fwd(ctx, q, &bt, &rng, s0, t0, mem, xo, cw));
    ATTN_TRYG(attn__lin_fwd(ctx, &q->gen, xo, y, bt.B * bt.T));
    attn__store(y, logits);
    if (cw) attn__store(cw, cross);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- training forward and backward ------------------------------------------------------ */

/* The record of a forward: the batch (ids and padding masks), the dropout streams of the two
 * embeddings and the two stacks' records (enc.out is the memory, dec.out the generator's
 * input). */
typedef struct s2s_rec {
    batch bt;
    attn__rng rsrc, rtgt;
    attn__stack_saved enc, dec;
} s2s_rec;

/* The forward of run_fwd, recording into rec (buffers from t, NULL: the caller's workspace
 * frame); rec->bt must be prepared. */
static attn_status fwd_rec(attn_ctx *ctx, const seq2seq *q, const attn_run *run, attn__tape *t,
                           int ckpt, s2s_rec *rec) {
    const batch *bt = &rec->bt;
    int64_t B = bt->B, S = bt->S, T = bt->T, E = bt->E;
    float p = q->cfg.tf.dropout;
    float *s0, *t0; /* copied by the stacks' records */
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    ATTN_TRY(attn__ws_f32(ctx, &s0, B, S, E, 1));
    ATTN_TRY(attn__ws_f32(ctx, &t0, B, T, E, 1));
    rec->rsrc = rng;
    embed(q, q->src_emb, bt->sid, B, S, s0);
    attn__dropout(&rng, p, s0, B * S * E);
    rec->rtgt = rng;
    embed(q, q->tgt_emb, bt->tid, B, T, t0);
    attn__dropout(&rng, p, t0, B * T * E);
    ATTN_TRY(attn__stack_fwd_rec(ctx, &q->s, 0, ckpt, t, s0, NULL, B, S, 0, NULL, &bt->skpm, NULL,
                                 NULL, 0, &rng, &rec->enc, NULL));
    return attn__stack_fwd_rec(ctx, &q->s, 1, ckpt, t, t0, rec->enc.out, B, T, S, NULL, &bt->tkpm,
                               NULL, &bt->skpm, 1, &rng, &rec->dec, NULL);
}

/* generator, decoder, encoder, then the embeddings; dl [B, T, Vt] contiguous. */
static attn_status bwd_rec(attn_ctx *ctx, const seq2seq *q, const attn__gmap *g,
                           const s2s_rec *rec, const float *dl) {
    const batch *bt = &rec->bt;
    int64_t B = bt->B, S = bt->S, T = bt->T, E = bt->E, V = q->cfg.tgt_vocab;
    float p = q->cfg.tf.dropout;
    attn__mark mk = attn__ws_mark(ctx);
    float *dxo, *dt0, *ds0, *dmem;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &ds0, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dmem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dxo, B, T, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dt0, B, T, E, 1));
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(q->gen.weight, NULL, V, E), rec->dec.out, E, dl, V,
                               dxo, E, 0, NULL, attn__g(g, q->gen.weight), attn__g(g, q->gen.bias),
                               B * T));
    attn__grad_ready(ctx, q->gen.weight - g->arena, V * E + V); /* the generator, and its bias */
    memset(dmem, 0, (size_t)(B * S * E) * sizeof(float));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, &q->s, g, &rec->dec, dxo, dt0, dmem));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, &q->s, g, &rec->enc, dmem, ds0, NULL));
    /* embeddings: dropout, then the sqrt(E) scale, scattered to the used rows */
    attn__rng r = rec->rsrc;
    attn__dropout(&r, p, ds0, B * S * E);
    r = rec->rtgt;
    attn__dropout(&r, p, dt0, B * T * E);
    {
        float sc = (float)sqrt((double)E);
        float *gs = attn__g(g, q->src_emb), *gt = attn__g(g, q->tgt_emb);
        for (int64_t i = 0; i < B * S; i++)
            for (int64_t e = 0; e < E; e++) gs[bt->sid[i] * E + e] += ds0[i * E + e] * sc;
        for (int64_t i = 0; i < B * T; i++)
            for (int64_t e = 0; e < E; e++) gt[bt->tid[i] * E + e] += dt0[i * E + e] * sc;
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

static attn_status check_dlogits(attn_ctx *ctx, const seq2seq *q, const batch *bt,
                                 const attn_tensor *dlogits, const float **dl) {
    ATTN_TRY(attn__check(ctx, dlogits, "dlogits", ATTN_F32, 3, 3));
    int64_t ls[3] = {bt->B, bt->T, q->cfg.tgt_vocab};
    ATTN_TRY(attn__check_shape(ctx, dlogits, "dlogits", 3, ls));
    ATTN_TRY(attn__check_finite(ctx, dlogits, "dlogits", 0));
    return attn__contig(ctx, dlogits, dl);
}

attn_status attn_seq2seq_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                  const attn_tensor *tgt, const attn_run *run,
                                  const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEQ2SEQ, "attn_seq2seq_backward"));
    const seq2seq *q = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    attn__mark mk = attn__ws_mark(ctx);
    s2s_rec rec;
    const float *dl;
    attn_status st;
    ATTN_TRYG(prepare(ctx, NULL, q, src, tgt, &rec.bt));
    ATTN_TRYG(check_dlogits(ctx, q, &rec.bt, dlogits, &dl));
    /* recompute: checkpointed records (each layer's input) in the workspace */
    ATTN_TRYG(fwd_rec(ctx, q, run, NULL, 1, &rec));
    ATTN_TRYG(bwd_rec(ctx, q, &g, &rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_seq2seq_forward_train(attn_ctx *ctx, const attn_module *m,
                                       const attn_tensor *src, const attn_tensor *tgt,
                                       const attn_run *run, attn_tensor *logits,
                                       attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEQ2SEQ, "attn_seq2seq_forward_train"));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    ATTN_FAIL_IF(!tgt, ctx, ATTN_E_INVALID, "tgt is missing");
    attn__saved_begin(saved);
    const seq2seq *q = m->impl;
    attn__mark mk = attn__ws_mark(ctx);
    s2s_rec *rec;
    float *y;
    attn_status st;
    ATTN_TRYG(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(prepare(ctx, &saved->tape, q, src, tgt, &rec->bt));
    int64_t B = rec->bt.B, T = rec->bt.T, V = q->cfg.tgt_vocab;
    ATTN_TRYG(attn__check(ctx, logits, "logits", ATTN_F32, 3, 3));
    {
        int64_t ls[3] = {B, T, V};
        ATTN_TRYG(attn__check_shape(ctx, logits, "logits", 3, ls));
    }
    ATTN_TRYG(fwd_rec(ctx, q, run, &saved->tape, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0,
                      rec));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, T, V, 1));
    ATTN_TRYG(attn__lin_fwd(ctx, &q->gen, rec->dec.out, y, B * T));
    attn__store(y, logits);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_seq2seq_backward_saved(attn_ctx *ctx, const attn_module *m,
                                        const attn_saved *saved, const attn_tensor *dlogits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEQ2SEQ, "attn_seq2seq_backward_saved"));
    const seq2seq *q = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    s2s_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_seq2seq_backward_saved", (void **)&rec));
    attn__mark mk = attn__ws_mark(ctx);
    const float *dl;
    attn_status st;
    ATTN_TRYG(check_dlogits(ctx, q, &rec->bt, dlogits, &dl));
    ATTN_TRYG(bwd_rec(ctx, q, &g, rec, dl));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_seq2seq_greedy(attn_ctx *ctx, const attn_module *m, const attn_tensor *src,
                                int64_t bos_id, int64_t eos_id, attn_tensor *out,
                                attn_tensor *cross) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__SEQ2SEQ, "attn_seq2seq_greedy"));
    const seq2seq *q = m->impl;
    const attn_seq2seq_config *c = &q->cfg;
    ATTN_FAIL_IF(bos_id < 0 || bos_id >= c->tgt_vocab || eos_id < 0 || eos_id >= c->tgt_vocab,
                 ctx, ATTN_E_INVALID, "bos_id and eos_id must be target token ids");
    ATTN_TRY(attn__check(ctx, out, "out", ATTN_I64, 2, 2));
    attn__mark mk = attn__ws_mark(ctx);
    batch bt;
    float *s0, *mem, *x, *y, *cw = NULL, *crow = NULL;
    int64_t *seq;
    unsigned char *tpad, *done_row;
    attn_status st;
    attn__rng rng = attn__rng_from(NULL);
    ATTN_TRYG(prepare(ctx, NULL, q, src, NULL, &bt));
    int64_t B = bt.B, S = bt.S, E = bt.E, V = c->tgt_vocab, T = out->shape[1];
    if (out->shape[0] != B || T + 1 > c->max_len) {
        st = attn__fail(ctx, ATTN_E_SHAPE, "out must be [%lld, T] with T < max_len %lld",
                        (long long)B, (long long)c->max_len);
        goto done;
    }
    if (cross && cross->data) {
        int64_t cs[3] = {B, T, S};
        ATTN_TRYG(attn__check(ctx, cross, "cross", ATTN_F32, 3, 3));
        ATTN_TRYG(attn__check_shape(ctx, cross, "cross", 3, cs));
        ATTN_TRYG(attn__ws_f32(ctx, &cw, B, T + 1, S, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &crow, B, T, S, 1));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &s0, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &mem, B, S, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, T + 1, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, V, 1, 1));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * (T + 1)), sizeof *seq, (void **)&seq));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * (T + 1)), 1, (void **)&tpad));
    ATTN_TRYG(attn__ws_alloc(ctx, (size_t)B, 1, (void **)&done_row));
    embed(q, q->src_emb, bt.sid, B, S, s0);
    memcpy(mem, s0, (size_t)(B * S * E) * sizeof(float));
    ATTN_TRYG(attn__enc_run(ctx, &q->s, mem, B, S, NULL, &bt.skpm, 0, &rng));
    memset(done_row, 0, (size_t)B);
    for (int64_t b = 0; b < B; b++) seq[b * (T + 1)] = bos_id;
    for (int64_t t = 0; t < T; t++) {
        int64_t L = t + 1; /* decode the prefix [bos, chosen...] of length L */
        int64_t *pref;
        ATTN_TRYG(attn__ws_alloc(ctx, (size_t)(B * L), sizeof *pref, (void **)&pref));
        for (int64_t b = 0; b < B; b++)
            for (int64_t l = 0; l < L; l++) {
                pref[b * L + l] = seq[b * (T + 1) + l];
                tpad[b * L + l] = 0;
            }
        int64_t ts[2] = {B, L};
        attn_mask tk = {ATTN_MASK_BLOCK, attn_tensor_make(tpad, ATTN_BOOL, 2, ts)};
        embed(q, q->tgt_emb, pref, B, L, x);
        ATTN_TRYG(attn__dec_run(ctx, &q->s, x, mem, B, L, S, NULL, NULL, &tk, &bt.skpm, 1, &rng,
                                cw));
        for (int64_t b = 0; b < B; b++) {
            ATTN_TRYG(attn__lin_fwd(ctx, &q->gen, x + (b * L + t) * E, y + b * V, 1));
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (y[b * V + v] > y[b * V + best]) best = v;
            if (done_row[b]) best = c->pad_id;
            else if (best == eos_id) done_row[b] = 1;
            seq[b * (T + 1) + t + 1] = best;
            ((int64_t *)out->data)[b * out->stride[0] + t * out->stride[1]] = best;
            if (crow)
                memcpy(crow + (b * T + t) * S, cw + (b * L + t) * S, (size_t)S * sizeof(float));
        }
    }
    if (crow) attn__store(crow, cross);
    st = ATTN_OK;
done:
    attn__ws_release(ctx, mk);
    return st;
}
