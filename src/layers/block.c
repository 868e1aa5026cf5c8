/* The one residual block (attn__block, layers.h): the Transformer encoder and decoder layers,
 * the Llama family's decoder layer, ViT's and BERT's layers are configurations of it.  One
 * forward (with or without a record, with KV caches), one backward from the record, one
 * recomputing backward, and the registration of torch's Transformer layers as blocks.
 *
 * Bits.  Each configuration computes what its own layer code computed before the block
 * existed: without dropout the residual add (and a post-norm LayerNorm) runs in the epilogue of
 * the sublayer's last product (attn__res_blk, transformer.h); with dropout the sublayer writes
 * to scratch and the add follows; sandwich norms normalise the sublayer's output, then add.
 * Float additions of two terms are commutative, so the backward's gradient sums are the same
 * bits whether they run in a product's epilogue or after it. */
#include <stdio.h>
#include <string.h>

#include "../kernels/ew.h"
#include "llm.h"
#include "transformer.h"

/* The sublayers of b in forward order. */
static int subs_of(const attn__block *b, int *s) {
    int n = 0;
    s[n++] = ATTN__SUB_SELF;
    if (b->cross) s[n++] = ATTN__SUB_CROSS;
    s[n++] = ATTN__SUB_FFN;
    return n;
}

/* y = norm(x) (LayerNorm or RMSNorm); y may be x. */
static void norm_fwd(attn_ctx *ctx, const attn__ln *n, const float *x, float *y, int64_t M) {
    attn__ln_fwd(ctx, n, x, y, M);
}

/* Backward of norm_fwd at x: dx (may be dy; NULL: only the weight's gradient). */
static attn_status norm_bwd(attn_ctx *ctx, const attn__gmap *g, const attn__ln *n,
                            const float *x, const float *dy, float *dx, int64_t M) {
    if (n->rms)
        return attn__rms_norm_bwd(ctx, x, n->E, n->weight, n->eps, dy, n->E, dx, n->E,
                                  attn__g(g, n->weight), M, n->E);
    return attn__ln_bwd(ctx, g, n, x, dy, dx, M);
}

/* Whether sublayer s keeps its pre-norm input in the record (LayerNorm's; RMSNorm's is
 * recomputed). */
static int keeps_in(const attn__block *b, int s) { return b->pre && !b->norm[s].rms; }

attn_status attn__block_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__block *b,
                                    int64_t B, int64_t T, int64_t S, attn__block_saved *sv) {
    int sub[ATTN__SUB_N];
    const int n = subs_of(b, sub);
    const int64_t E = b->E, M = B * T;
    memset(sv, 0, sizeof *sv);
    for (int i = 0; i < n; i++) {
        const int s = sub[i], last = i == n - 1;
        if (keeps_in(b, s)) ATTN_TRY(attn__rec_f32(ctx, t, &sv->in[s], M, E, 1, 1));
        if (!b->pre || !last) ATTN_TRY(attn__rec_f32(ctx, t, &sv->r[s], M, E, 1, 1));
        if (!b->pre && !last) ATTN_TRY(attn__rec_f32(ctx, t, &sv->in[sub[i + 1]], M, E, 1, 1));
    }
    for (int i = 0; b->sandwich && i < n; i++)
        ATTN_TRY(attn__rec_f32(ctx, t, &sv->o[sub[i]], M, E, 1, 1));
    ATTN_TRY(attn__attn_saved_alloc(ctx, t, &b->at[0], B, T, T, 1, &sv->at[0]));
    if (b->cross) ATTN_TRY(attn__attn_saved_alloc(ctx, t, &b->at[1], B, T, S, 0, &sv->at[1]));
    if (b->glu) return attn__llama_mlp_saved_alloc(ctx, t, &b->mlp, M, &sv->mlp);
    return attn__ffn_saved_alloc(ctx, t, &b->l1, b->act, M, &sv->ff);
}

/* The attention of sublayer s (SELF or CROSS) on in. */
static attn__attn_io attn_io(const attn__block_io *io, int s, const float *in) {
    if (s == ATTN__SUB_CROSS)
        return attn__attn_io_mha(in, io->mem, io->mem, io->B, io->T, io->S, io->mkpm, io->mmask,
                                 0, io->rng);
    attn__attn_io a = attn__attn_io_mha(in, in, in, io->B, io->T, io->T, io->kpm, io->mask,
                                        io->causal, io->rng);
    a.rope = io->rope, a.kv = io->kv, a.nkv = io->nkv, a.last_rows = io->last_rows;
    a.seql = io->seql, a.nseq = io->nseq;
    return a;
}

/* y = f_s(in), then the epilogue e (NULL or NONE, RES, RES_LN: not for the gated
 * feed-forward, whose residual is its only epilogue); M: the feed-forward's rows. */
static attn_status sub_fwd(attn_ctx *ctx, const attn__block *b, int s, const attn__block_io *io,
                           const float *in, float *y, const attn__epi *e, int64_t M,
                           attn__block_saved *sv) {
    if (s != ATTN__SUB_FFN) {
        const attn__attn_io a = attn_io(io, s, in);
        return attn__attention_fwd(ctx, &b->at[s], &a, y, e, s ? io->cross_w : NULL, 1,
                                   sv ? &sv->at[s] : NULL);
    }
    if (b->glu)
        return attn__llama_mlp_fwd_rec(ctx, &b->mlp, in, M, io->T,
                                       e && e->kind == ATTN__EPI_RES ? e->r : NULL, y,
                                       sv ? &sv->mlp : NULL);
    return attn__ffn_fwd(ctx, &b->l1, &b->l2, b->act, b->p, in, y, M, io->rng,
                         sv ? &sv->ff : NULL, e);
}

/* The last row of each of the io's sequences, from x [B T, E] into y [nseq, E]. */
static int64_t last_rows_of(const attn__block_io *io, const float *x, float *y, int64_t E) {
    const int64_t ns = io->nkv ? io->nkv : io->B;
    for (int64_t b = 0, r = 0; b < ns; b++) {
        r += io->nkv ? io->kv[b].len : io->T;
        memcpy(y + b * E, x + (r - 1) * E, (size_t)E * sizeof(float));
    }
    return ns;
}

/* io->last_rows where the block cannot compute only them: the whole block, then those rows */
static attn_status block_fwd_then_last(attn_ctx *ctx, const attn__block *b, const float *x,
                                       float *out, const attn__block_io *io) {
    attn__block_io all = *io;
    all.last_rows = 0;
    attn__mark mk = attn__ws_mark(ctx);
    float *t;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, io->B * io->T, b->E, 1, 1));
    ATTN_TRYG(attn__block_fwd(ctx, b, x, t, &all, NULL));
    last_rows_of(io, t, out, b->E);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__block_fwd(attn_ctx *ctx, const attn__block *b, const float *x, float *out,
                            const attn__block_io *io, attn__block_saved *sv) {
    if (io->last_rows && (!io->kv || !b->glu || b->cross || sv))
        return block_fwd_then_last(ctx, b, x, out, io);
    int sub[ATTN__SUB_N];
    const int n = subs_of(b, sub);
    const int64_t E = b->E;
    int64_t M = io->B * io->T; /* the stream's rows: with io->last_rows, each sequence's last
                                * once the self-attention has run */
    attn__rng none = {0, 0, 0, 0, 0}, *rng = io->rng ? io->rng : &none; /* NULL: no dropout */
    const int drop = attn__drops(rng, b->p);
    attn__mark mk = attn__ws_mark(ctx);
    float *nb = NULL, *v = NULL, *ob = NULL, *st_buf[2] = {NULL, NULL};
    const float *cur = x;
    attn_status st;
    /* the workspace: a norm's output, the dropout's scratch, the sandwich's sublayer output,
     * and two streams that alternate (the record's buffers where it has them) */
    float *xl = NULL;
    if (io->last_rows) ATTN_TRYG(attn__ws_f32(ctx, &xl, io->nkv ? io->nkv : io->B, E, 1, 1));
    if (b->pre) ATTN_TRYG(attn__ws_f32(ctx, &nb, M, E, 1, 1));
    if (drop) ATTN_TRYG(attn__ws_f32(ctx, &v, M, E, 1, 1));
    if (b->sandwich && !sv) ATTN_TRYG(attn__ws_f32(ctx, &ob, M, E, 1, 1));
    for (int k = 0; k < 2 && !sv; k++) ATTN_TRYG(attn__ws_f32(ctx, &st_buf[k], M, E, 1, 1));
    for (int i = 0; i < n; i++) {
        const int s = sub[i], last = i == n - 1;
        const attn__ln *nm = &b->norm[s];
        const float *in = cur;
        if (b->pre) {
            float *p = sv && sv->in[s] ? sv->in[s] : nb;
            norm_fwd(ctx, nm, cur, p, M);
            in = p;
        }
        if (io->last_rows && s == ATTN__SUB_SELF) { /* the residual's rows: the last ones */
            M = last_rows_of(io, cur, xl, E);
            cur = xl;
        }
        /* the new stream: out for the last sublayer, else the record's or a free buffer */
        float *dst = last ? out : sv ? (b->pre ? sv->r[s] : sv->in[sub[i + 1]])
                                     : st_buf[cur == st_buf[0]];
        if (b->sandwich) { /* f into o, its norm into dst, then dst = cur + dst */
            float *o = sv ? sv->o[s] : ob;
            ATTN_TRYG(sub_fwd(ctx, b, s, io, in, o, NULL, M, sv));
            norm_fwd(ctx, &b->post[s], o, dst, M);
            if (sv) sv->d[s] = *rng;
            if (drop) attn__dropout(rng, b->p, dst, M * E);
            attn__add_f32(ctx, cur, dst, dst, M * E);
            if (!b->pre) norm_fwd(ctx, nm, dst, dst, M);
            cur = dst;
            continue;
        }
        /* post-norm: the sum kept in the record, or (RMSNorm, or a gated feed-forward, which
         * have no fused norm epilogue) made in dst and normalised in place */
        float *rstore = NULL;
        if (!b->pre)
            rstore = sv ? sv->r[s] : (nm->rms || (s == ATTN__SUB_FFN && b->glu)) ? dst : NULL;
        attn__res_blk rb = {drop, cur, b->pre ? NULL : nm, rstore, dst, v};
        attn__epi e;
        float *y = attn__res_target(&rb, &e);
        ATTN_TRYG(sub_fwd(ctx, b, s, io, in, y, &e, M, sv));
        attn__res_end(ctx, &rb, rng, b->p, M, E, sv ? &sv->d[s] : NULL);
        cur = dst;
    }
    if (sv) sv->x0 = x, sv->mem = io->mem;
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* The gradient into the input of sublayer s from gd (its output's gradient): dq [M, E]
 * overwritten, plus res where not NULL (res must not be dq); cross-attention also accumulates
 * the memory's gradient into dmem (dk, dv: scratch [B S, E]). */
static attn_status sub_bwd(attn_ctx *ctx, const attn__block *b, const attn__gmap *g, int s,
                           const attn__block_saved *sv, const attn__block_io *io,
                           const float *in, const float *gd, float *dq, const float *res,
                           float *dk, float *dv, float *dmem) {
    const int64_t M = io->B * io->T, ns = io->B * io->S * b->E;
    if (s == ATTN__SUB_SELF) {
        attn__attn_io a = attn_io(io, s, in);
        a.kpm = a.mask = NULL, a.rng = NULL, a.kv = NULL, a.causal = ATTN_CAUSAL_NONE;
        return attn__attention_bwd(ctx, &b->at[0], g, &sv->at[0], &a, gd, NULL, NULL, NULL, dq,
                                   res);
    }
    if (s == ATTN__SUB_CROSS) {
        const attn__attn_io a =
            attn__attn_io_mha(in, sv->mem, sv->mem, io->B, io->T, io->S, NULL, NULL, 0, NULL);
        ATTN_TRY(attn__attention_bwd(ctx, &b->at[1], g, &sv->at[1], &a, gd, dq, dk, dv, NULL,
                                     NULL));
        attn__add_f32(ctx, dk, dv, dk, ns);
        attn__add_f32(ctx, dmem, dk, dmem, ns);
        if (res) attn__add_f32(ctx, res, dq, dq, M * b->E);
        return ATTN_OK;
    }
    if (b->glu) {
        ATTN_TRY(attn__llama_mlp_bwd(ctx, &b->mlp, g, &sv->mlp, in, M, gd, dq));
        if (res) attn__add_f32(ctx, res, dq, dq, M * b->E);
        return ATTN_OK;
    }
    return attn__ffn_bwd_saved(ctx, &b->l1, &b->l2, g, b->act, b->p, &sv->ff, in, gd, dq, res,
                               M);
}

attn_status attn__block_bwd(attn_ctx *ctx, const attn__block *b, const attn__gmap *g,
                            const attn__block_saved *sv, const attn__block_io *io,
                            const float *dout, float *dx, float *dmem) {
    int sub[ATTN__SUB_N];
    const int n = subs_of(b, sub);
    const int64_t E = b->E, M = io->B * io->T, nel = M * E;
    const int64_t SL = io->T > io->S ? io->T : io->S;
    attn__mark mk = attn__ws_mark(ctx);
    float *t, *dq, *dr, *dbuf[2], *dk = NULL, *dv = NULL, *nb = NULL, *ds = NULL;
    const float *d = dout; /* the gradient of the stream after the sublayer */
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &t, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dq, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dr, M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dbuf[0], M, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dbuf[1], M, E, 1, 1));
    if (b->pre) ATTN_TRYG(attn__ws_f32(ctx, &nb, M, E, 1, 1));
    if (b->sandwich) ATTN_TRYG(attn__ws_f32(ctx, &ds, M, E, 1, 1));
    if (b->cross) {
        ATTN_TRYG(attn__ws_f32(ctx, &dk, io->B, SL, E, 1));
        ATTN_TRYG(attn__ws_f32(ctx, &dv, io->B, SL, E, 1));
    }
    for (int i = n - 1; i >= 0; i--) {
        const int s = sub[i];
        const attn__ln *nm = &b->norm[s];
        /* the stream entering sublayer s */
        const float *x_s = i == 0 ? sv->x0 : b->pre ? sv->r[sub[i - 1]] : sv->in[s];
        float *dnext = i == 0 && dx ? dx : dbuf[d == dbuf[0]];
        const float *dR = d; /* the gradient of the residual sum */
        if (!b->pre) {
            ATTN_TRYG(norm_bwd(ctx, g, nm, sv->r[s], d, dr, M));
            dR = dr;
        }
        attn__rng r = sv->d[s];
        const float *gd = attn__dropout_grad(&r, b->p, dR, t, nel);
        if (b->sandwich) {
            ATTN_TRYG(norm_bwd(ctx, g, &b->post[s], sv->o[s], gd, ds, M));
            gd = ds;
        }
        if (b->pre) { /* d x_s = dR + norm_s'(f_s'(gd)) */
            const float *in = sv->in[s];
            if (!in) {
                norm_fwd(ctx, nm, x_s, nb, M);
                in = nb;
            }
            ATTN_TRYG(sub_bwd(ctx, b, g, s, sv, io, in, gd, dq, NULL, dk, dv, dmem));
            if (i == 0 && !dx) {
                ATTN_TRYG(norm_bwd(ctx, g, nm, x_s, dq, NULL, M));
                break;
            }
            ATTN_TRYG(norm_bwd(ctx, g, nm, x_s, dq, dnext, M));
            attn__add_f32(ctx, dR, dnext, dnext, nel);
        } else { /* d x_s = dR + f_s'(gd), the sum in the last product's epilogue */
            float *o = i == 0 && !dx ? dq : dnext;
            ATTN_TRYG(sub_bwd(ctx, b, g, s, sv, io, x_s, gd, o, dR, dk, dv, dmem));
        }
        d = dnext;
    }
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__block_bwd_re(attn_ctx *ctx, const attn__block *b, const attn__gmap *g,
                               const float *x0, const attn__block_io *io, const float *dout,
                               float *dx, float *dmem) {
    attn__mark mk = attn__ws_mark(ctx);
    attn__block_saved sv;
    float *out;
    attn_status st;
    ATTN_TRYG(attn__block_saved_alloc(ctx, NULL, b, io->B, io->T, io->S, &sv));
    ATTN_TRYG(attn__ws_f32(ctx, &out, io->B, io->T, b->E, 1));
    ATTN_TRYG(attn__block_fwd(ctx, b, x0, out, io, &sv));
    ATTN_TRYG(attn__block_bwd(ctx, b, g, &sv, io, dout, dx, dmem));
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__block_tf_reg(attn_ctx *ctx, attn_module *m, const char *prefix,
                               attn__block *b, const attn_transformer_config *cfg, int dec) {
    static const char *const attn_name[2] = {"self_attn.", "multihead_attn."};
    static const char *const norm_name[2][ATTN__SUB_N] = {{"norm1", NULL, "norm2"},
                                                          {"norm1", "norm2", "norm3"}};
    char p[160];
    attn_mha_config mc = attn__mha_cfg(cfg);
    const int64_t E = cfg->d_model, F = cfg->dim_feedforward;
    memset(b, 0, sizeof *b);
    b->E = E, b->pre = cfg->norm_first, b->cross = dec != 0;
    b->act = cfg->activation, b->p = cfg->dropout;
    for (int s = 0; s < 1 + b->cross; s++) {
        if (snprintf(p, sizeof p, "%s%s", prefix, attn_name[s]) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__attention_mha_reg(ctx, m, p, &b->at[s], &mc));
    }
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear1", &b->l1, E, F, cfg->bias));
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "linear2", &b->l2, F, E, cfg->bias));
    for (int s = 0; s < ATTN__SUB_N; s++)
        if (norm_name[b->cross][s])
            ATTN_TRY(attn__ln_reg(ctx, m, prefix, norm_name[b->cross][s], &b->norm[s], E,
                                  cfg->layer_norm_eps, cfg->bias));
    return ATTN_OK;
}
