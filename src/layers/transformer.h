/* Internal to the Transformer family in src/layers/ (block.c, ffn.c, encoder.c, decoder.c,
 * stack.c, transformer.c): the residual-block helpers of the one block, the feed-forward's
 * forward and backward, the masks of the public entry points and the stack module helpers.
 * The types and the entry points that other folders use (src/models/) are in layers.h.
 *
 * Backward.  Each block's backward reads the record its forward filled (attn__block_saved):
 * the intermediate values and a snapshot of the dropout stream before every dropout site, so
 * that the backward draws the same masks; dropout is linear, so its backward is the same
 * masking applied to the gradient.  The recomputing backwards run the forward again into a
 * record in the workspace first.  Input gradients are overwritten; parameter gradients
 * accumulate through the gmap. */
#ifndef ATTN_LAYERS_TRANSFORMER_H
#define ATTN_LAYERS_TRANSFORMER_H
#include <string.h>

#include "layers.h"

/* Backward of attn__ln_fwd: dx [M, E] (may alias dy) from dy; the weight and bias gradients
 * accumulate into g's buffers. */
static inline attn_status attn__ln_bwd(attn_ctx *ctx, const attn__gmap *g, const attn__ln *ln,
                                       const float *x, const float *dy, float *dx, int64_t M) {
    return attn__layer_norm_bwd(ctx, x, ln->E, ln->weight, ln->eps, dy, ln->E, dx, ln->E,
                                attn__g(g, ln->weight), attn__g(g, ln->bias), M, ln->E);
}

/* The attention configuration of a layer's self- and cross-attention. */
static inline attn_mha_config attn__mha_cfg(const attn_transformer_config *c) {
    attn_mha_config m = attn_mha_defaults(c->d_model, c->nhead);
    m.bias = c->bias;
    m.dropout = c->dropout;
    return m;
}

/* Whether dropout with probability p draws anything in this call (attn__dropout's rule):
 * without it the residual adds and layer norms fuse into the linears' epilogues. */
static inline int attn__drops(const attn__rng *rng, float p) {
    return rng && rng->training && p > 0.0f;
}

static inline void attn__copy_f(float *dst, const float *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* A gradient through the dropout the forward drew from rng: src itself when nothing was
 * dropped, else src copied into t with the same mask and scale applied. */
static inline const float *attn__dropout_grad(attn__rng *rng, float p, const float *src,
                                              float *t, int64_t n) {
    if (!attn__drops(rng, p)) return src;
    attn__copy_f(t, src, n);
    attn__dropout(rng, p, t, n);
    return t;
}

/* out[i] = a[i] + b[i]; out may alias a or b. */
static inline void attn__add2(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* One residual block of a layer, rows [M, E]: r = base + dropout(f(in)), then (post-norm)
 * dst = norm(r); pre-norm blocks have no norm and their output is r.  Without dropout the
 * add and the norm run in the epilogue of f's last linear (attn__res_target says where it
 * writes and with which epilogue); with dropout f writes to scratch and attn__res_end adds.
 * rstore: where a record keeps r (NULL: not kept).  The bits are the same either way:
 * r = (y + b) + base is base + (y + b), and the norm is attn__ln_fwd's. */
typedef struct attn__res_blk {
    int drop;
    const float *base;
    const attn__ln *norm;        /* post-norm: the norm after the add; pre-norm: NULL */
    float *rstore, *dst, *scratch;
} attn__res_blk;

static inline float *attn__res_target(const attn__res_blk *b, attn__epi *e) {
    memset(e, 0, sizeof *e);
    if (b->drop) return b->scratch;
    e->r = b->base;
    if (b->norm && !b->rstore) {
        e->kind = ATTN__EPI_RES_LN, e->ln = b->norm;
        return b->dst;
    }
    e->kind = ATTN__EPI_RES;
    return b->rstore ? b->rstore : b->dst;
}

/* After f: site (a record's, or NULL) receives the stream at the dropout; returns r. */
static inline float *attn__res_end(attn_ctx *ctx, const attn__res_blk *b, attn__rng *rng,
                                   float p, int64_t M, int64_t E, attn__rng *site) {
    float *r = b->rstore ? b->rstore : b->dst;
    if (site) *site = *rng;
    if (b->drop) {
        attn__dropout(rng, p, b->scratch, M * E);
        attn__add2(r, b->base, b->scratch, M * E);
    }
    if (b->norm && (b->drop || b->rstore)) attn__ln_fwd(ctx, b->norm, r, b->dst, M);
    return r;
}

/* ---- feed-forward (ffn.c) ------------------------------------------------------------ */
/* The record's h and a ([M, F]) for the feed-forward of l1 (attn__rec_f32). */
ATTN__HIDDEN attn_status attn__ffn_saved_alloc(attn_ctx *ctx, attn__tape *t, const attn__lin *l1,
                                               attn_activation act, int64_t M,
                                               attn__ffn_saved *sv);
/* y[M, E] = lin2(dropout(act(lin1(x[M, E])))), then oepi (NULL, or lin2's epilogue: a
 * residual, a layer norm); y must not overlap x or oepi->r.  sv: NULL, or a record whose h and
 * a ([M, F]) the forward fills (without one the activation runs in lin1's epilogue: the same
 * bits). */
ATTN__HIDDEN attn_status attn__ffn_fwd(attn_ctx *ctx, const attn__lin *l1, const attn__lin *l2,
                                       attn_activation act, float p, const float *x, float *y,
                                       int64_t M, attn__rng *rng, attn__ffn_saved *sv,
                                       const attn__epi *oepi);
/* Backward of y = lin2(dropout(act(lin1(x)))) from its record sv: dx [M, E] overwritten, plus
 * res [M, E] where res is not NULL (added as res + dx in the last product's epilogue; res
 * must not be dx). */
ATTN__HIDDEN attn_status attn__ffn_bwd_saved(attn_ctx *ctx, const attn__lin *l1,
                                             const attn__lin *l2, const attn__gmap *g,
                                             attn_activation act, float p,
                                             const attn__ffn_saved *sv, const float *x,
                                             const float *dy, float *dx, const float *res,
                                             int64_t M);

/* ---- the masks of the public entry points (encoder.c, decoder.c, transformer.c) -------- */
/* Which members of attn_transformer_masks an entry point reads: the encoder's (src_*), the
 * decoder's (tgt_*, memory_*), or both (nn.Transformer). */
enum { ATTN__TFM_SRC = 1, ATTN__TFM_DEC = 2, ATTN__TFM_ALL = 3 };
/* The number of mask members (attn__tf_mask_args, attn__tf_masks_saved). */
#define ATTN__TFM_N 6

/* The one reading of a caller's masks (NULL: none): the members `which` selects, as given;
 * the others NULL and 0.  The entry points pass the members on to the positional helpers. */
static inline attn_transformer_masks attn__tf_masks(const attn_transformer_masks *m,
                                                    int which) {
    attn_transformer_masks k;
    memset(&k, 0, sizeof k);
    if (m && (which & ATTN__TFM_SRC)) {
        k.src_mask = m->src_mask;
        k.src_key_padding_mask = m->src_key_padding_mask;
        k.src_is_causal = m->src_is_causal;
    }
    if (m && (which & ATTN__TFM_DEC)) {
        k.tgt_mask = m->tgt_mask;
        k.memory_mask = m->memory_mask;
        k.tgt_key_padding_mask = m->tgt_key_padding_mask;
        k.memory_key_padding_mask = m->memory_key_padding_mask;
        k.tgt_is_causal = m->tgt_is_causal;
    }
    return k;
}

/* Mask member i of k (0 <= i < ATTN__TFM_N: src_mask, tgt_mask, memory_mask, then the key
 * padding masks in the same order) and its name. */
static inline const attn_mask **attn__tf_mask_at(attn_transformer_masks *k, int i,
                                                 const char **name) {
    switch (i) {
    case 0: return *name = "src_mask", &k->src_mask;
    case 1: return *name = "tgt_mask", &k->tgt_mask;
    case 2: return *name = "memory_mask", &k->memory_mask;
    case 3: return *name = "src_key_padding_mask", &k->src_key_padding_mask;
    case 4: return *name = "tgt_key_padding_mask", &k->tgt_key_padding_mask;
    default: return *name = "memory_key_padding_mask", &k->memory_key_padding_mask;
    }
}

/* The masks of k as ATTN__TFM_N inputs of attn__check_outputs, named as the members (an
 * absent mask has no tensor and is skipped there). */
static inline void attn__tf_mask_args(attn_transformer_masks k, attn__arg *a) {
    for (int i = 0; i < ATTN__TFM_N; i++) {
        a[i].t = attn__mask_t(*attn__tf_mask_at(&k, i, &a[i].name));
        a[i].same_ok = 0;
    }
}

/* Copies of the masks of k in the tape t (attn__saved_mask: validated, contiguous), so that a
 * record does not read the caller's memory: c[ATTN__TFM_N] receives the copies, *out the
 * masks of k pointing at them (NULL where absent) and k's causal flags. */
ATTN__HIDDEN attn_status attn__tf_masks_saved(attn_ctx *ctx, attn__tape *t,
                                              const attn_transformer_masks *k, attn_mask *c,
                                              attn_transformer_masks *out);

/* ---- stack modules (stack.c) --------------------------------------------------------- */
/* Creates a stack module of the given kind (impl bytes, an attn__stack first): nenc encoder
 * layers under prefix ep, ndec decoder layers under dp, final norms en / dn (NULL = none). */
ATTN__HIDDEN attn_status attn__stack_new(attn_ctx *ctx, attn__kind kind,
                                         const attn_transformer_config *cfg, int64_t nenc,
                                         int64_t ndec, const char *ep, const char *dp,
                                         const char *en, const char *dn, size_t impl,
                                         attn_module **out);
/* A layer module as a stack of one layer without final norm (one: its storage), so that
 * layers and stacks share the records; a stack module is returned as it is. */
ATTN__HIDDEN const attn__stack *attn__as_stack(const attn_module *m, attn__stack *one);

/* The entry points of the encoder and decoder layers and stacks (stack.c), one implementation
 * for the public functions of encoder.c and decoder.c: kind is the module kind the public
 * function expects (the decoder kinds add the memory mem and its gradient dmem; encoder kinds
 * pass NULL), fn its name for messages. */
ATTN__HIDDEN attn_status attn__seq_forward(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                                           const char *fn, const attn_tensor *x,
                                           const attn_tensor *mem,
                                           const attn_transformer_masks *masks,
                                           const attn_run *run, attn_tensor *out);
ATTN__HIDDEN attn_status attn__seq_backward(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                                            const char *fn, const attn_tensor *x,
                                            const attn_tensor *mem,
                                            const attn_transformer_masks *masks,
                                            const attn_run *run, const attn_tensor *dout,
                                            attn_tensor *dx, attn_tensor *dmem);
ATTN__HIDDEN attn_status attn__seq_forward_train(attn_ctx *ctx, const attn_module *m,
                                                 attn__kind kind, const char *fn,
                                                 const attn_tensor *x, const attn_tensor *mem,
                                                 const attn_transformer_masks *masks,
                                                 const attn_run *run, attn_tensor *out,
                                                 attn_saved *saved);
ATTN__HIDDEN attn_status attn__seq_backward_saved(attn_ctx *ctx, const attn_module *m,
                                                  attn__kind kind, const char *fn,
                                                  const attn_saved *saved,
                                                  const attn_tensor *dout, attn_tensor *dx,
                                                  attn_tensor *dmem);
/* Record of an encoder or decoder layer or stack (in the tape). */
typedef struct attn__seq_rec {
    attn__stack_saved st; /* its masks and memory are copies in the tape */
} attn__seq_rec;

#endif
