/* Encoder and decoder stacks (attn__stack: the layers of nn.TransformerEncoder / Decoder, the
 * halves of nn.Transformer, GPT's blocks): registration, the inference forward, the recording
 * forward and its backward that every training path of the family runs, and the entry points
 * of the encoder and decoder layers and stacks (attn__seq_*). */
#include <stdio.h>
#include <string.h>

#include "transformer.h"

/* Builds encoder layers under enc_prefix ("layers." or "encoder.layers.") and decoder layers
 * under dec_prefix; final norms under the given names (NULL = none). */
attn_status attn__stack_reg(attn_ctx *ctx, attn_module *m, attn__stack *s,
                            const attn_transformer_config *cfg, int64_t nenc, int64_t ndec,
                            const char *enc_prefix, const char *dec_prefix, const char *enc_norm,
                            const char *dec_norm, size_t tail_bytes, void **tail) {
    char p[160];
    s->cfg = *cfg;
    s->nenc = nenc;
    s->ndec = ndec;
    if (ctx->psrc) { /* counts from a file's claims size the layer arrays below */
        int64_t lim = attn_ctx_limit(ctx, ATTN_LIMIT_LAYERS);
        ATTN_FAIL_IF(nenc > lim || ndec > lim, ctx, ATTN_E_UNSUPPORTED,
                     "%s layer count %lld is over ATTN_LIMIT_LAYERS (%lld)",
                     nenc > lim ? "encoder" : "decoder", (long long)(nenc > lim ? nenc : ndec),
                     (long long)lim);
    }
    /* one allocation for both layer arrays, owned by the module (m->extra) */
    size_t ne = (size_t)nenc * sizeof(attn__block), nd = (size_t)ndec * sizeof(attn__block);
    size_t tot = ne + nd; /* the caller's tail after the layers, 64-byte aligned */
    tot = (tot + 63) & ~(size_t)63;
    size_t tail_off = tot;
    if (!attn__add_size(tot, tail_bytes, &tot))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "model too large");
    m->extra = attn__calloc(ctx, 1, tot);
    if (!m->extra) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (layers)");
    if (tail) *tail = tail_bytes ? (char *)m->extra + tail_off : NULL;
    s->enc = nenc ? (attn__block *)m->extra : NULL;
    s->dec = ndec ? (attn__block *)((char *)m->extra + ne) : NULL;
    /* m->numel counts the parameters registered so far: the arena offset of the next one */
    s->enc_at = m->numel;
    for (int64_t i = 0; i < nenc; i++) {
        if (snprintf(p, sizeof p, "%s%lld.", enc_prefix, (long long)i) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__block_tf_reg(ctx, m, p, &s->enc[i], cfg, 0));
        if (i == 0) s->enc_len = m->numel - s->enc_at;
    }
    s->encn_at = m->numel;
    if (enc_norm) {
        s->enc_norm = 1;
        ATTN_TRY(attn__ln_reg(ctx, m, "", enc_norm, &s->enc_final, cfg->d_model,
                              cfg->layer_norm_eps, cfg->bias));
    }
    s->encn_len = m->numel - s->encn_at;
    s->dec_at = m->numel;
    for (int64_t i = 0; i < ndec; i++) {
        if (snprintf(p, sizeof p, "%s%lld.", dec_prefix, (long long)i) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__block_tf_reg(ctx, m, p, &s->dec[i], cfg, 1));
        if (i == 0) s->dec_len = m->numel - s->dec_at;
    }
    s->decn_at = m->numel;
    if (dec_norm) {
        s->dec_norm = 1;
        ATTN_TRY(attn__ln_reg(ctx, m, "", dec_norm, &s->dec_final, cfg->d_model,
                              cfg->layer_norm_eps, cfg->bias));
    }
    s->decn_len = m->numel - s->decn_at;
    return ATTN_OK;
}

attn_status attn__stack_new(attn_ctx *ctx, attn__kind kind, const attn_transformer_config *cfg,
                            int64_t nenc, int64_t ndec, const char *ep, const char *dp,
                            const char *en, const char *dn, size_t impl, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, cfg));
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, kind, impl, &m));
    attn_status st = attn__stack_reg(ctx, m, m->impl, cfg, nenc, ndec, ep, dp, en, dn, 0, NULL);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn__tf_masks_saved(attn_ctx *ctx, attn__tape *t, const attn_transformer_masks *k,
                                 attn_mask *c, attn_transformer_masks *out) {
    *out = *k;
    for (int i = 0; i < ATTN__TFM_N; i++) {
        const char *name;
        const attn_mask **m = attn__tf_mask_at(out, i, &name);
        ATTN_TRY(attn__saved_mask(ctx, t, *m, name, &c[i]));
        *m = attn__mask_opt(&c[i]);
    }
    return ATTN_OK;
}

/* The io of a stack's layers: an encoder's (m1 = mask, m2 = key padding mask) or a decoder's
 * (m1 = tgt_mask, m2 = tgt key padding mask, mm = memory_mask, mk = memory key padding mask,
 * over mem [B, S, E]). */
static attn__block_io stack_io(int64_t B, int64_t T, int64_t S, const float *mem,
                               const attn_mask *m1, const attn_mask *m2, const attn_mask *mm,
                               const attn_mask *mk, int is_causal, attn__rng *rng) {
    attn__block_io io;
    memset(&io, 0, sizeof io);
    io.B = B, io.T = T, io.S = S, io.mem = mem;
    io.mask = m1, io.kpm = m2, io.causal = is_causal, io.mmask = mm, io.mkpm = mk;
    io.rng = rng;
    return io;
}

/* Encoder stack over x [B, L, E] in place. */
attn_status attn__enc_run(attn_ctx *ctx, const attn__stack *s, float *x, int64_t B, int64_t L,
                          const attn_mask *mask, const attn_mask *kpm, int is_causal,
                          attn__rng *rng) {
    const attn__block_io io = stack_io(B, L, 0, NULL, mask, kpm, NULL, NULL, is_causal, rng);
    for (int64_t i = 0; i < s->nenc; i++)
        ATTN_TRY(attn__block_fwd(ctx, &s->enc[i], x, x, &io, NULL));
    if (s->enc_norm) attn__ln_fwd(ctx, &s->enc_final, x, x, B * L);
    return ATTN_OK;
}

attn_status attn__dec_run(attn_ctx *ctx, const attn__stack *s, float *x, const float *mem,
                          int64_t B, int64_t T, int64_t S, const attn_mask *tm,
                          const attn_mask *mm, const attn_mask *tk, const attn_mask *mk,
                          int tgt_is_causal, attn__rng *rng, float *cross_w) {
    attn__block_io io = stack_io(B, T, S, mem, tm, tk, mm, mk, tgt_is_causal, rng);
    for (int64_t i = 0; i < s->ndec; i++) {
        io.cross_w = i == s->ndec - 1 ? cross_w : NULL;
        ATTN_TRY(attn__block_fwd(ctx, &s->dec[i], x, x, &io, NULL));
    }
    if (s->dec_norm) attn__ln_fwd(ctx, &s->dec_final, x, x, B * T);
    return ATTN_OK;
}

attn_status attn__stack_fwd_rec(attn_ctx *ctx, const attn__stack *s, int dec, int ckpt,
                                attn__tape *t, const float *x, const float *mem, int64_t B,
                                int64_t T, int64_t S, const attn_mask *m1, const attn_mask *m2,
                                const attn_mask *mm, const attn_mask *mk, int is_causal,
                                attn__rng *rng, attn__stack_saved *rec, float *out) {
    int64_t E = s->cfg.d_model, n = B * T * E, N = dec ? s->ndec : s->nenc;
    const attn__ln *fin = dec ? (s->dec_norm ? &s->dec_final : NULL)
                              : (s->enc_norm ? &s->enc_final : NULL);
    memset(rec, 0, sizeof *rec);
    rec->decoder = dec, rec->ckpt = ckpt, rec->is_causal = is_causal;
    rec->N = N, rec->B = B, rec->T = T, rec->S = S;
    if (m1) rec->m1 = *m1;
    if (m2) rec->m2 = *m2;
    if (mm) rec->mm = *mm;
    if (mk) rec->mk = *mk;
    rec->mem = mem;
    const attn__block_io io = stack_io(B, T, S, mem, m1, m2, mm, mk, is_causal, rng);
    if (fin || N < 1) out = NULL; /* the final norm's backward reads the last output */
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->xs, out ? N : N + 1, B, T, E));
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->rs, (void **)&rec->rs));
    if (!ckpt) ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->ls, (void **)&rec->ls));
    attn__copy_f(rec->xs, x, n);
    for (int64_t i = 0; i < N; i++) {
        const float *xi = rec->xs + i * n;
        float *xo = out && i == N - 1 ? out : rec->xs + (i + 1) * n;
        rec->rs[i] = *rng;
        const attn__block *l = dec ? &s->dec[i] : &s->enc[i];
        attn__block_saved *sv = ckpt ? NULL : &rec->ls[i];
        if (sv) ATTN_TRY(attn__block_saved_alloc(ctx, t, l, B, T, S, sv));
        ATTN_TRY(attn__block_fwd(ctx, l, xi, xo, &io, sv));
    }
    rec->out = out ? out : rec->xs + N * n;
    if (fin) {
        ATTN_TRY(attn__rec_f32(ctx, t, &rec->out, B, T, E, 1));
        attn__ln_fwd(ctx, fin, rec->xs + N * n, rec->out, B * T);
    }
    return ATTN_OK;
}

/* The final norm's backward, then the layers' in reverse: from their records, or (ckpt) each
 * layer's forward again from its input and stream, then its backward. */
attn_status attn__stack_bwd_rec(attn_ctx *ctx, const attn__stack *s, const attn__gmap *g,
                                const attn__stack_saved *rec, const float *dout, float *dx,
                                float *dmem) {
    int dec = rec->decoder;
    int64_t B = rec->B, T = rec->T, S = rec->S, N = rec->N, n = B * T * s->cfg.d_model;
    const attn__ln *fin = dec ? (s->dec_norm ? &s->dec_final : NULL)
                              : (s->enc_norm ? &s->enc_final : NULL);
    const attn_mask *m1 = attn__mask_opt(&rec->m1), *m2 = attn__mask_opt(&rec->m2),
                    *mm = attn__mask_opt(&rec->mm), *mk = attn__mask_opt(&rec->mk);
    attn__mark mark = attn__ws_mark(ctx);
    float *d, *t;
    const float *din = dout; /* the gradient into layer i (never written) */
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &d, B, T, s->cfg.d_model, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &t, B, T, s->cfg.d_model, 1));
    if (fin) {
        ATTN_TRYG(attn__ln_bwd(ctx, g, fin, rec->xs + N * n, dout, d, B * T));
        attn__grad_ready(ctx, dec ? s->decn_at : s->encn_at, dec ? s->decn_len : s->encn_len);
        din = d;
    }
    for (int64_t i = N - 1; i >= 0; i--) {
        /* layer i writes its input's gradient into the buffer din does not use; the first
         * layer straight into dx (unless the caller's dx is its dout) */
        float *dst = i == 0 && dx != din ? dx : din == d ? t : d;
        const float *xi = rec->xs + i * n;
        attn__rng r = rec->rs[i];
        const attn__block *l = dec ? &s->dec[i] : &s->enc[i];
        const attn__block_io io = stack_io(B, T, S, rec->mem, m1, m2, mm, mk, rec->is_causal, &r);
        if (rec->ckpt) ATTN_TRYG(attn__block_bwd_re(ctx, l, g, xi, &io, din, dst, dmem));
        else ATTN_TRYG(attn__block_bwd(ctx, l, g, &rec->ls[i], &io, din, dst, dmem));
        if (dec) attn__grad_ready(ctx, s->dec_at + i * s->dec_len, s->dec_len);
        else attn__grad_ready(ctx, s->enc_at + i * s->enc_len, s->enc_len);
        din = dst;
    }
    if (din != dx) attn__copy_f(dx, din, n);
done:
    attn__ws_release(ctx, mark);
    return st;
}

/* A layer module as a stack of one layer without final norm, so that layers and stacks share
 * the records. */
const attn__stack *attn__as_stack(const attn_module *m, attn__stack *one) {
    if (m->kind == ATTN__ENCODER || m->kind == ATTN__DECODER) return m->impl;
    memset(one, 0, sizeof *one);
    attn__tf_layer *l = m->impl;
    one->cfg = l->cfg;
    if (m->kind == ATTN__ENC_LAYER) {
        one->enc = &l->b;
        one->nenc = 1;
        one->enc_len = m->numel;
    } else {
        one->dec = &l->b;
        one->ndec = 1;
        one->dec_len = m->numel;
    }
    return one;
}

/* ---- the entry points of the encoder and decoder layers and stacks ----------------------
 * One implementation for the sixteen public functions of encoder.c and decoder.c: a layer runs
 * as a stack of one (attn__as_stack); the decoder adds the memory, its gradient and its masks.
 * Names in messages are the public ones (src / tgt, dsrc / dtgt, memory, dmemory). */
static int seq_is_dec(attn__kind kind) { return kind == ATTN__DEC_LAYER || kind == ATTN__DECODER; }

/* The stack's masks of k in the order of attn__stack_fwd_rec (m1, m2, mm, mk, is_causal). */
typedef struct seq_masks {
    const attn_mask *m1, *m2, *mm, *mk;
    int causal;
} seq_masks;

static seq_masks seq_masks_of(const attn_transformer_masks *k, int dec) {
    seq_masks r = {dec ? k->tgt_mask : k->src_mask,
                   dec ? k->tgt_key_padding_mask : k->src_key_padding_mask,
                   dec ? k->memory_mask : NULL, dec ? k->memory_key_padding_mask : NULL,
                   dec ? k->tgt_is_causal : k->src_is_causal};
    return r;
}

/* x (NULL: none), mem (dec), dout (NULL: a forward, whose output is o0) and the masks (NULL:
 * none) against the outputs o0 (out, or dsrc / dtgt) and o1 (dmemory). */
static attn_status seq_check(attn_ctx *ctx, const char *fn, const attn_module *m, int dec,
                             const attn_tensor *x, const attn_tensor *mem,
                             const attn_tensor *dout, const attn_transformer_masks *k,
                             const attn_tensor *o0, const attn_tensor *o1) {
    attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
    attn__arg oa[2], ia[5 + ATTN__TFM_N];
    int no = 0, ni = 0;
    oa[no++] = (attn__arg){o0, dout ? (dec ? "dtgt" : "dsrc") : "out", 0};
    if (dout && dec) oa[no++] = (attn__arg){o1, "dmemory", 0};
    if (x) ia[ni++] = (attn__arg){x, dec ? "tgt" : "src", 0};
    if (x && dec) ia[ni++] = (attn__arg){mem, "memory", 0};
    if (dout) ia[ni++] = (attn__arg){dout, "dout", 0};
    ia[ni++] = (attn__arg){&P, "the module's parameters", 0};
    if (dout) ia[ni++] = (attn__arg){&G, "the module's gradients", 0};
    if (k) {
        attn__tf_mask_args(*k, ia + ni);
        ni += ATTN__TFM_N;
    }
    return attn__check_outputs(ctx, fn, oa, no, ia, ni);
}

/* The inputs x [B, T, E] and (dec) mem [B, S, E], and an output [B, T, E]. */
static attn_status seq_inputs(attn_ctx *ctx, int dec, int64_t E, const attn_tensor *x,
                              const attn_tensor *mem, const attn_tensor *out, int64_t *B,
                              int64_t *T, int64_t *S, const float **xp, const float **mp) {
    ATTN_TRY(attn__seq_in(ctx, x, dec ? "tgt" : "src", E, B, T, xp));
    if (dec) ATTN_TRY(attn__seq_in(ctx, mem, "memory", E, B, S, mp));
    if (!out) return ATTN_OK;
    ATTN_TRY(attn__check(ctx, out, "output", ATTN_F32, 3, 3));
    int64_t shape[3] = {*B, *T, E};
    return attn__check_shape(ctx, out, "output", 3, shape);
}

/* dout [B, T, E] and the optional gradient outputs dx [B, T, E], (dec) dmem [B, S, E]. */
static attn_status seq_grads(attn_ctx *ctx, int dec, const attn_tensor *dout,
                             const attn_tensor *dx, const attn_tensor *dmem, int64_t B,
                             int64_t *T, int64_t S, int64_t E, const float **dy) {
    ATTN_TRY(attn__seq_in(ctx, dout, "dout", E, &B, T, dy));
    ATTN_TRY(attn__seq_grad_out(ctx, dx, dec ? "dtgt" : "dsrc", B, *T, E));
    return dec ? attn__seq_grad_out(ctx, dmem, "dmemory", B, S, E) : ATTN_OK;
}

/* The gradient outputs dx [B, T, E] and (dec) dmem [B, S, E] as buffers: their own memory
 * where contiguous (attn__seq_grad_buf); dmem zeroed (it accumulates). */
static attn_status seq_grad_bufs(attn_ctx *ctx, int dec, const attn_tensor *dx,
                                 const attn_tensor *dmem, int64_t B, int64_t T, int64_t S,
                                 int64_t E, float **d, float **dm) {
    *dm = NULL;
    ATTN_TRY(attn__seq_grad_buf(ctx, dx, B, T, E, d));
    if (!dec) return ATTN_OK;
    ATTN_TRY(attn__seq_grad_buf(ctx, dmem, B, S, E, dm));
    memset(*dm, 0, (size_t)(B * S * E) * sizeof(float));
    return ATTN_OK;
}

static void seq_grad_store(int dec, float *d, float *dm, attn_tensor *dx, attn_tensor *dmem) {
    if (dx && dx->data) attn__store(d, dx);
    if (dec && dmem && dmem->data) attn__store(dm, dmem);
}

attn_status attn__seq_forward(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                              const char *fn, const attn_tensor *x, const attn_tensor *mem,
                              const attn_transformer_masks *masks, const attn_run *run,
                              attn_tensor *out) {
    ATTN_TRY(attn__module_expect(ctx, m, kind, fn));
    const int dec = seq_is_dec(kind);
    attn_transformer_masks k = attn__tf_masks(masks, dec ? ATTN__TFM_DEC : ATTN__TFM_SRC);
    attn__stack one;
    const attn__stack *s = attn__as_stack(m, &one);
    int64_t B = 0, T = 0, S = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *in, *mp = NULL;
    float *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(seq_inputs(ctx, dec, E, x, mem, out, &B, &T, &S, &in, &mp));
    rng.nb = B;
    ATTN_TRYG(seq_check(ctx, fn, m, dec, x, mem, NULL, &k, out, NULL));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, T, E, 1));
    memcpy(y, in, (size_t)(B * T * E) * sizeof(float));
    const seq_masks q = seq_masks_of(&k, dec);
    if (dec)
        ATTN_TRYG(attn__dec_run(ctx, s, y, mp, B, T, S, q.m1, q.mm, q.m2, q.mk, q.causal, &rng,
                                NULL));
    else
        ATTN_TRYG(attn__enc_run(ctx, s, y, B, T, q.m1, q.m2, q.causal, &rng));
    attn__store(y, out);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__seq_backward(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                               const char *fn, const attn_tensor *x, const attn_tensor *mem,
                               const attn_transformer_masks *masks, const attn_run *run,
                               const attn_tensor *dout, attn_tensor *dx, attn_tensor *dmem) {
    ATTN_TRY(attn__module_expect(ctx, m, kind, fn));
    const int dec = seq_is_dec(kind);
    attn_transformer_masks k = attn__tf_masks(masks, dec ? ATTN__TFM_DEC : ATTN__TFM_SRC);
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    attn__stack one;
    const attn__stack *s = attn__as_stack(m, &one);
    int64_t B = 0, T = 0, S = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *in, *mp = NULL, *dy;
    float *d, *dm;
    attn__stack_saved rec;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(seq_inputs(ctx, dec, E, x, mem, NULL, &B, &T, &S, &in, &mp));
    rng.nb = B;
    ATTN_TRYG(seq_grads(ctx, dec, dout, dx, dmem, B, &T, S, E, &dy));
    ATTN_TRYG(seq_check(ctx, fn, m, dec, x, mem, dout, &k, dx, dmem));
    ATTN_TRYG(seq_grad_bufs(ctx, dec, dx, dmem, B, T, S, E, &d, &dm));
    /* a checkpointed record in the workspace (each layer's forward runs again just before
     * its backward), then its backward */
    const seq_masks q = seq_masks_of(&k, dec);
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, dec, 1, NULL, in, mp, B, T, S, q.m1, q.m2, q.mm, q.mk,
                                  q.causal, &rng, &rec, NULL));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, &g, &rec, dy, d, dm));
    seq_grad_store(dec, d, dm, dx, dmem);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__seq_forward_train(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                                    const char *fn, const attn_tensor *x, const attn_tensor *mem,
                                    const attn_transformer_masks *masks, const attn_run *run,
                                    attn_tensor *out, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, kind, fn));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    const int dec = seq_is_dec(kind);
    attn_transformer_masks k = attn__tf_masks(masks, dec ? ATTN__TFM_DEC : ATTN__TFM_SRC), kc;
    attn__saved_begin(saved);
    attn__stack one;
    const attn__stack *s = attn__as_stack(m, &one);
    int64_t B = 0, T = 0, S = 0, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    attn__tape *t = &saved->tape;
    const float *in, *mp = NULL;
    float *memc = NULL;
    attn__seq_rec *rec;
    attn_mask c[ATTN__TFM_N];
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    ATTN_TRYG(seq_inputs(ctx, dec, E, x, mem, out, &B, &T, &S, &in, &mp));
    rng.nb = B;
    ATTN_TRYG(seq_check(ctx, fn, m, dec, x, mem, NULL, &k, out, NULL));
    /* a contiguous out receives the last layer's output directly */
    float *direct = attn_tensor_is_contiguous(out) ? out->data : NULL;
    ATTN_TRYG(attn__tape_alloc(ctx, t, 1, sizeof *rec, (void **)&rec));
    if (dec) { /* the backward reads the memory: a copy, so that the caller may change it */
        ATTN_TRYG(attn__rec_f32(ctx, t, &memc, B, S, E, 1));
        attn__copy_f(memc, mp, B * S * E);
    }
    ATTN_TRYG(attn__tf_masks_saved(ctx, t, &k, c, &kc));
    const seq_masks q = seq_masks_of(&kc, dec);
    ATTN_TRYG(attn__stack_fwd_rec(ctx, s, dec, (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, t, in,
                                  memc, B, T, S, q.m1, q.m2, q.mm, q.mk, q.causal, &rng, &rec->st,
                                  direct));
    attn__store(rec->st.out, out);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn__seq_backward_saved(attn_ctx *ctx, const attn_module *m, attn__kind kind,
                                     const char *fn, const attn_saved *saved,
                                     const attn_tensor *dout, attn_tensor *dx,
                                     attn_tensor *dmem) {
    ATTN_TRY(attn__module_expect(ctx, m, kind, fn));
    const int dec = seq_is_dec(kind);
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    attn__seq_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, fn, (void **)&rec));
    attn__stack one;
    const attn__stack *s = attn__as_stack(m, &one);
    int64_t B = rec->st.B, T = rec->st.T, S = rec->st.S, E = s->cfg.d_model;
    attn__mark mk = attn__ws_mark(ctx);
    const float *dy;
    float *d, *dm;
    attn_status st;
    ATTN_TRYG(seq_grads(ctx, dec, dout, dx, dmem, B, &T, S, E, &dy));
    ATTN_TRYG(seq_check(ctx, fn, m, dec, NULL, NULL, dout, NULL, dx, dmem));
    ATTN_TRYG(seq_grad_bufs(ctx, dec, dx, dmem, B, T, S, E, &d, &dm));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, s, &g, &rec->st, dy, d, dm));
    seq_grad_store(dec, d, dm, dx, dmem);
done:
    attn__ws_release(ctx, mk);
    return st;
}
