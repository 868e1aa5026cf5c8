/* Encoder and decoder stacks (attn__stack: the layers of nn.TransformerEncoder / Decoder, the
 * halves of nn.Transformer, GPT's blocks): registration, the inference forward, and the
 * recording forward and its backward that every training path of the family runs. */
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
    size_t ne = (size_t)nenc * sizeof(attn__enc_layer), nd = (size_t)ndec * sizeof(attn__dec_layer);
    size_t tot = ne + nd; /* the caller's tail after the layers, 64-byte aligned */
    tot = (tot + 63) & ~(size_t)63;
    size_t tail_off = tot;
    if (!attn__add_size(tot, tail_bytes, &tot))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "model too large");
    m->extra = attn__calloc(ctx, 1, tot);
    if (!m->extra) return attn__fail(ctx, ATTN_E_NOMEM, "out of memory (layers)");
    if (tail) *tail = tail_bytes ? (char *)m->extra + tail_off : NULL;
    s->enc = nenc ? (attn__enc_layer *)m->extra : NULL;
    s->dec = ndec ? (attn__dec_layer *)((char *)m->extra + ne) : NULL;
    /* m->numel counts the parameters registered so far: the arena offset of the next one */
    s->enc_at = m->numel;
    for (int64_t i = 0; i < nenc; i++) {
        if (snprintf(p, sizeof p, "%s%lld.", enc_prefix, (long long)i) >= (int)sizeof p)
            return attn__fail(ctx, ATTN_E_INVALID, "parameter name prefix too long");
        ATTN_TRY(attn__enc_layer_reg(ctx, m, p, &s->enc[i], cfg));
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
        ATTN_TRY(attn__dec_layer_reg(ctx, m, p, &s->dec[i], cfg));
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

/* Encoder stack over x [B, L, E] in place. */
attn_status attn__enc_run(attn_ctx *ctx, const attn__stack *s, float *x, int64_t B, int64_t L,
                           const attn_mask *mask, const attn_mask *kpm, int is_causal,
                           attn__rng *rng) {
    for (int64_t i = 0; i < s->nenc; i++)
        ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], x, x, B, L, mask, kpm, is_causal, rng,
                                     NULL));
    if (s->enc_norm) attn__ln_fwd(ctx, &s->enc_final, x, x, B * L);
    return ATTN_OK;
}

attn_status attn__dec_run(attn_ctx *ctx, const attn__stack *s, float *x, const float *mem,
                           int64_t B, int64_t T, int64_t S, const attn_mask *tm,
                           const attn_mask *mm, const attn_mask *tk, const attn_mask *mk,
                           int tgt_is_causal, attn__rng *rng, float *cross_w) {
    for (int64_t i = 0; i < s->ndec; i++)
        ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], x, x, mem, B, T, S, tm, mm, tk, mk,
                                     tgt_is_causal, rng, i == s->ndec - 1 ? cross_w : NULL,
                                     NULL));
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
    if (fin || N < 1) out = NULL; /* the final norm's backward reads the last output */
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->xs, out ? N : N + 1, B, T, E));
    ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->rs, (void **)&rec->rs));
    if (!ckpt && dec)
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->dec, (void **)&rec->dec));
    if (!ckpt && !dec)
        ATTN_TRY(attn__rec_alloc(ctx, t, (size_t)N, sizeof *rec->enc, (void **)&rec->enc));
    attn__copy_f(rec->xs, x, n);
    for (int64_t i = 0; i < N; i++) {
        const float *xi = rec->xs + i * n;
        float *xo = out && i == N - 1 ? out : rec->xs + (i + 1) * n;
        rec->rs[i] = *rng;
        if (dec) {
            attn__dec_saved *sv = ckpt ? NULL : &rec->dec[i];
            if (sv) ATTN_TRY(attn__dec_saved_alloc(ctx, t, &s->dec[i], B, T, S, sv));
            ATTN_TRY(attn__dec_layer_fwd(ctx, &s->dec[i], xi, xo, mem, B, T, S, m1, mm, m2, mk,
                                         is_causal, rng, NULL, sv));
        } else {
            attn__enc_saved *sv = ckpt ? NULL : &rec->enc[i];
            if (sv) ATTN_TRY(attn__enc_saved_alloc(ctx, t, &s->enc[i], B, T, sv));
            ATTN_TRY(attn__enc_layer_fwd(ctx, &s->enc[i], xi, xo, B, T, m1, m2, is_causal, rng,
                                         sv));
        }
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
        if (dec && rec->ckpt)
            ATTN_TRYG(attn__dec_layer_bwd(ctx, &s->dec[i], g, xi, rec->mem, B, T, S, m1, mm, m2, mk,
                                          rec->is_causal, &r, din, dst, dmem));
        else if (dec)
            ATTN_TRYG(attn__dec_layer_bwd_saved(ctx, &s->dec[i], g, &rec->dec[i], B, T, S, din, dst,
                                                dmem));
        else if (rec->ckpt)
            ATTN_TRYG(attn__enc_layer_bwd(ctx, &s->enc[i], g, xi, B, T, m1, m2, rec->is_causal, &r,
                                          din, dst));
        else
            ATTN_TRYG(attn__enc_layer_bwd_saved(ctx, &s->enc[i], g, &rec->enc[i], B, T, din, dst));
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
    if (m->kind == ATTN__ENC_LAYER) {
        one->enc = m->impl;
        one->cfg = one->enc->cfg;
        one->nenc = 1;
        one->enc_len = m->numel;
    } else {
        one->dec = m->impl;
        one->cfg = one->dec->cfg;
        one->ndec = 1;
        one->dec_len = m->numel;
    }
    return one;
}
