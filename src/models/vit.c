/* The Vision Transformer: the ViT input embedding (seed 003: a [CLS] token, then each patch
 * projected, plus learned positions; also a module of its own, attn_vit_embed_*), and the
 * whole classifier on top of it: patchify, the embedding, a stack of encoder layers with a
 * final norm (layers/stack.c, not causal) and a linear head on the [CLS] vector; forward,
 * backward, training forward and saved backward, and the [CLS] attention maps. */
#include <string.h>

#include "../layers/layers.h"

/* ---- the embedding (seed 003) -------------------------------------------------------- */
typedef struct vit_embed {
    int64_t P, E, N; /* patch vector length, d_model, max patches */
    float *cls, *pos; /* [1, 1, E], [1, N + 1, E] */
    attn__lin proj;   /* [E, P] */
} vit_embed;

/* Registers prefix + cls_token, proj.weight, proj.bias, pos_embed. */
static attn_status embed_reg(attn_ctx *ctx, attn_module *m, const char *prefix, vit_embed *v,
                             int64_t patch_dim, int64_t E, int64_t max_patches) {
    v->P = patch_dim, v->E = E, v->N = max_patches;
    ATTN_TRY(attn__param_reg(ctx, m, prefix, "cls_token", &v->cls, 0, 3, 1, 1, E));
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    ATTN_TRY(attn__lin_reg(ctx, m, prefix, "proj", &v->proj, patch_dim, E, 1));
    ATTN_TRY(attn__param_reg(ctx, m, prefix, "pos_embed", &v->pos, 0, 3, 1, max_patches + 1, E));
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    return ATTN_OK;
}

/* z [B, N+1, E] = [cls; p proj^T] + pos[:N+1], p [B, N, P] contiguous (N <= v->N). */
static attn_status embed_fwd(attn_ctx *ctx, const vit_embed *v, const float *p, int64_t B,
                             int64_t N, float *z) {
    int64_t E = v->E;
    for (int64_t b = 0; b < B; b++) {
        float *zb = z + b * (N + 1) * E;
        memcpy(zb, v->cls, (size_t)E * sizeof(float));
        ATTN_TRY(attn__lin_fwd(ctx, &v->proj, p + b * N * v->P, zb + E, N));
        for (int64_t i = 0; i < (N + 1) * E; i++) zb[i] += v->pos[i];
    }
    return ATTN_OK;
}

/* Backward of embed_fwd: the parameter gradients accumulate; dp [B, N, P] (NULL: not wanted)
 * is overwritten. */
static attn_status embed_bwd(attn_ctx *ctx, const vit_embed *v, const attn__gmap *g,
                             const float *p, int64_t B, int64_t N, const float *dz, float *dp) {
    int64_t E = v->E;
    float *gcls = attn__g(g, v->cls), *gpos = attn__g(g, v->pos);
    for (int64_t b = 0; b < B; b++) {
        const float *db = dz + b * (N + 1) * E;
        for (int64_t e = 0; e < E; e++) gcls[e] += db[e];
        for (int64_t i = 0; i < (N + 1) * E; i++) gpos[i] += db[i];
        ATTN_TRY(attn__matmul_bwd(ctx, ATTN__W32(v->proj.weight, NULL, E, v->P), p + b * N * v->P,
                                  v->P, db + E, E, dp ? dp + b * N * v->P : NULL, v->P, 0, NULL,
                                  attn__g(g, v->proj.weight), attn__g(g, v->proj.bias), N));
    }
    return ATTN_OK;
}

attn_status attn_vit_embed_create(attn_ctx *ctx, int64_t patch_dim, int64_t E,
                                  int64_t max_patches, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(patch_dim <= 0 || E <= 0 || max_patches <= 0 || max_patches == INT64_MAX, ctx,
                 ATTN_E_INVALID, "patch_dim, embed_dim and max_patches must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__VIT_EMBED, sizeof(vit_embed), &m));
    attn_status st = embed_reg(ctx, m, "", m->impl, patch_dim, E, max_patches);
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_vit_embed_forward(attn_ctx *ctx, const attn_module *m,
                                   const attn_tensor *patches, attn_tensor *z) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_forward"));
    const vit_embed *v = m->impl;
    int64_t B = 0, N = 0;
    attn__mark mk = attn__ws_mark(ctx);
    const float *p;
    float *zp;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, patches, "patches", v->P, &B, &N, &p));
    if (N > v->N) {
        st = attn__fail(ctx, ATTN_E_SHAPE, "%lld patches exceed max_patches %lld", (long long)N,
                        (long long)v->N);
        goto done;
    }
    ATTN_TRYG(attn__check(ctx, z, "z", ATTN_F32, 3, 3));
    {
        int64_t shape[3] = {B, N + 1, v->E};
        ATTN_TRYG(attn__check_shape(ctx, z, "z", 3, shape));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{z, "z", 0}},
                  ia[] = {{patches, "patches", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_vit_embed_forward", oa, 1, ia, 2));
    }
    ATTN_TRYG(attn__ws_f32(ctx, &zp, B, N + 1, v->E, 1));
    ATTN_TRYG(embed_fwd(ctx, v, p, B, N, zp));
    attn__store(zp, z);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_embed_backward(attn_ctx *ctx, const attn_module *m,
                                    const attn_tensor *patches, const attn_tensor *dz,
                                    attn_tensor *dpatches) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_backward"));
    const vit_embed *v = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0, N = 0, E = v->E;
    attn__mark mk = attn__ws_mark(ctx);
    const float *p, *d;
    float *dp = NULL;
    attn_status st;
    ATTN_TRYG(attn__seq_in(ctx, patches, "patches", v->P, &B, &N, &p));
    if (N > v->N) {
        st = attn__fail(ctx, ATTN_E_SHAPE, "%lld patches exceed max_patches %lld", (long long)N,
                        (long long)v->N);
        goto done;
    }
    {
        int64_t N1 = N + 1;
        ATTN_TRYG(attn__seq_in(ctx, dz, "dz", E, &B, &N1, &d));
    }
    if (dpatches && dpatches->data) {
        ATTN_TRYG(attn__seq_out(ctx, dpatches, "dpatches", B, N, v->P, &dp));
    }
    {
        attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
        attn__arg oa[] = {{dpatches, "dpatches", 0}},
                  ia[] = {{patches, "patches", 0}, {dz, "dz", 0},
                          {&P, "the module's parameters", 0}, {&G, "the module's gradients", 0}};
        ATTN_TRYG(attn__check_outputs(ctx, "attn_vit_embed_backward", oa, 1, ia, 4));
    }
    ATTN_TRYG(embed_bwd(ctx, v, &g, p, B, N, d, dp));
    if (dp) attn__seq_out_end(dp, dpatches);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- the Vision Transformer ---------------------------------------------------------- */
typedef struct vit {
    attn__stack s;     /* layers.N.*, norm.* */
    vit_embed emb;     /* embed.* */
    attn__lin head;    /* head.weight [K, E], head.bias [K] */
    int64_t img, C, p; /* image side, channels, patch side */
    int64_t G, N, K;   /* patches per side, patches (G*G), classes */
} vit;

attn_status attn_vit_create(attn_ctx *ctx, const attn_vit_config *cfg, attn_module **out) {
    if (!ctx || !out || !cfg) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_TRY(attn__check_tcfg(ctx, &cfg->tf));
    ATTN_FAIL_IF(cfg->tf.num_encoder_layers < 1, ctx, ATTN_E_INVALID,
                 "a ViT needs at least one layer (tf.num_encoder_layers)");
    ATTN_FAIL_IF(cfg->image_size <= 0 || cfg->channels <= 0 || cfg->patch <= 0 ||
                     cfg->num_classes <= 0,
                 ctx, ATTN_E_INVALID,
                 "image_size (%lld), channels (%lld), patch (%lld) and num_classes (%lld) must "
                 "be positive",
                 (long long)cfg->image_size, (long long)cfg->channels, (long long)cfg->patch,
                 (long long)cfg->num_classes);
    ATTN_FAIL_IF(cfg->image_size % cfg->patch != 0, ctx, ATTN_E_INVALID,
                 "patch (%lld) must divide image_size (%lld)", (long long)cfg->patch,
                 (long long)cfg->image_size);
    int64_t G = cfg->image_size / cfg->patch, N, P, n;
    ATTN_FAIL_IF(!attn__mul_i64(G, G, &N) || N == INT64_MAX ||
                     !attn__mul_i64(cfg->patch, cfg->patch, &P) ||
                     !attn__mul_i64(P, cfg->channels, &P) ||
                     !attn__mul_i64(N + 1, cfg->tf.d_model, &n) ||
                     !attn__mul_i64(P, cfg->tf.d_model, &n) ||
                     !attn__mul_i64(cfg->image_size, cfg->image_size, &n) ||
                     !attn__mul_i64(n, cfg->channels, &n),
                 ctx, ATTN_E_OVERFLOW,
                 "ViT sizes overflow (image_size %lld, channels %lld, patch %lld, d_model %lld)",
                 (long long)cfg->image_size, (long long)cfg->channels, (long long)cfg->patch,
                 (long long)cfg->tf.d_model);
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__VIT, sizeof(vit), &m));
    vit *v = m->impl;
    v->img = cfg->image_size, v->C = cfg->channels, v->p = cfg->patch;
    v->G = G, v->N = N, v->K = cfg->num_classes;
    int64_t E = cfg->tf.d_model;
    attn_status st = embed_reg(ctx, m, "embed.", &v->emb, P, E, N);
    if (st == ATTN_OK)
        st = attn__stack_reg(ctx, m, &v->s, &cfg->tf, cfg->tf.num_encoder_layers, 0, "layers.",
                             "", "norm", NULL, 0, NULL);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "head", &v->head, E, v->K, 1);
    return attn__module_done(ctx, m, st, out);
}

/* Validates images [B, C, H, W] (F32, finite) against v; *B receives the batch. */
static attn_status vit_images(attn_ctx *ctx, const vit *v, const attn_tensor *images,
                              int64_t *B) {
    ATTN_TRY(attn__check(ctx, images, "images", ATTN_F32, 4, 4));
    int64_t shape[4] = {images->shape[0], v->C, v->img, v->img};
    ATTN_TRY(attn__check_shape(ctx, images, "images", 4, shape));
    ATTN_TRY(attn__check_finite(ctx, images, "images", 0));
    *B = images->shape[0];
    return ATTN_OK;
}

/* Patchify: patches [B, N, C*p*p] from images [B, C, H, W] (any strides).  Patch n = py*G + px
 * (row-major over the grid); its vector is [c][dy][dx], pixel (py*p + dy, px*p + dx) of
 * channel c: Conv2d(kernel = stride = p) with weight proj.weight.view(E, C, p, p). */
static void patchify(const vit *v, const attn_tensor *images, int64_t B, float *patches) {
    const float *x = images->data;
    const int64_t *s = images->stride;
    int64_t p = v->p, P = v->emb.P;
    for (int64_t b = 0; b < B; b++)
        for (int64_t py = 0; py < v->G; py++)
            for (int64_t px = 0; px < v->G; px++) {
                float *o = patches + ((b * v->N) + py * v->G + px) * P;
                for (int64_t c = 0; c < v->C; c++)
                    for (int64_t dy = 0; dy < p; dy++) {
                        const float *row = x + b * s[0] + c * s[1] + (py * p + dy) * s[2] +
                                           px * p * s[3];
                        for (int64_t dx = 0; dx < p; dx++) *o++ = row[dx * s[3]];
                    }
            }
}

/* The inverse of patchify: dimages [B, C, H, W] contiguous from dpatches [B, N, C*p*p]. */
static void unpatchify(const vit *v, const float *dp, int64_t B, float *di) {
    int64_t p = v->p, H = v->img, P = v->emb.P;
    for (int64_t b = 0; b < B; b++)
        for (int64_t py = 0; py < v->G; py++)
            for (int64_t px = 0; px < v->G; px++) {
                const float *o = dp + ((b * v->N) + py * v->G + px) * P;
                for (int64_t c = 0; c < v->C; c++)
                    for (int64_t dy = 0; dy < p; dy++) {
                        float *row = di + ((b * v->C + c) * H + py * p + dy) * H + px * p;
                        for (int64_t dx = 0; dx < p; dx++) row[dx] = *o++;
                    }
            }
}

/* The embedded tokens x [B, N+1, E] of images (checked), before the embedding dropout;
 * patches [B, N, P] receives the patch vectors.  Buffers from the caller. */
static attn_status vit_embed_images(attn_ctx *ctx, const vit *v, const attn_tensor *images,
                                    int64_t B, float *patches, float *x) {
    patchify(v, images, B, patches);
    return embed_fwd(ctx, &v->emb, patches, B, v->N, x);
}

/* The logits of the final norm's output xn [B, N+1, E]: the head on each [CLS] row. */
static attn_status vit_head(attn_ctx *ctx, const vit *v, const float *xn, int64_t B, float *y) {
    int64_t E = v->s.cfg.d_model;
    return attn__matmul(ctx, ATTN__W32(v->head.weight, v->head.bias, v->K, E), xn, (v->N + 1) * E,
                        B, ATTN__MM_GEMM, NULL, y, v->K);
}

/* Checks logits [B, K] (F32) and that they overlap none of the inputs. */
static attn_status vit_logits_out(attn_ctx *ctx, const attn_module *m, const vit *v,
                                  const char *fn, const attn_tensor *images, int64_t B,
                                  attn_tensor *logits) {
    ATTN_TRY(attn__check(ctx, logits, "logits", ATTN_F32, 2, 2));
    int64_t shape[2] = {B, v->K};
    ATTN_TRY(attn__check_shape(ctx, logits, "logits", 2, shape));
    attn_tensor P = attn_view1(m->arena, m->numel);
    attn__arg oa[] = {{logits, "logits", 0}},
              ia[] = {{images, "images", 0}, {&P, "the module's parameters", 0}};
    return attn__check_outputs(ctx, fn, oa, 1, ia, 2);
}

attn_status attn_vit_forward(attn_ctx *ctx, const attn_module *m, const attn_tensor *images,
                             const attn_run *run, attn_tensor *logits) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT, "attn_vit_forward"));
    const vit *v = m->impl;
    int64_t B = 0, E = v->s.cfg.d_model, L = v->N + 1;
    ATTN_TRY(vit_images(ctx, v, images, &B));
    ATTN_TRY(vit_logits_out(ctx, m, v, "attn_vit_forward", images, B, logits));
    attn__mark mk = attn__ws_mark(ctx);
    float *pt, *x, *y;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    ATTN_TRYG(attn__ws_f32(ctx, &pt, B, v->N, v->emb.P, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, v->K, 1, 1));
    ATTN_TRYG(vit_embed_images(ctx, v, images, B, pt, x));
    attn__dropout(&rng, v->s.cfg.dropout, x, B * L * E);
    ATTN_TRYG(attn__enc_run(ctx, &v->s, x, B, L, NULL, NULL, 0, &rng));
    ATTN_TRYG(vit_head(ctx, v, x, B, y));
    attn__store(y, logits);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_attention(attn_ctx *ctx, const attn_module *m, const attn_tensor *images,
                               const attn_run *run, attn_tensor *cls_attn) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT, "attn_vit_attention"));
    const vit *v = m->impl;
    int64_t B = 0, E = v->s.cfg.d_model, H = v->s.cfg.nhead, L = v->N + 1, NL = v->s.nenc;
    ATTN_TRY(vit_images(ctx, v, images, &B));
    ATTN_TRY(attn__check(ctx, cls_attn, "cls_attn", ATTN_F32, 4, 4));
    {
        int64_t shape[4] = {NL, B, H, L};
        ATTN_TRY(attn__check_shape(ctx, cls_attn, "cls_attn", 4, shape));
        attn_tensor P = attn_view1(m->arena, m->numel);
        attn__arg oa[] = {{cls_attn, "cls_attn", 0}},
                  ia[] = {{images, "images", 0}, {&P, "the module's parameters", 0}};
        ATTN_TRY(attn__check_outputs(ctx, "attn_vit_attention", oa, 1, ia, 2));
    }
    attn__mark mk = attn__ws_mark(ctx);
    float *pt, *x, *n, *q, *o, *w;
    attn_status st;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    ATTN_TRYG(attn__ws_f32(ctx, &pt, B, v->N, v->emb.P, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &x, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &n, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &q, B, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &o, B, E, 1, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &w, NL, B, H, L));
    ATTN_TRYG(vit_embed_images(ctx, v, images, B, pt, x));
    attn__dropout(&rng, v->s.cfg.dropout, x, B * L * E);
    for (int64_t i = 0; i < NL; i++) {
        const attn__block *l = &v->s.enc[i];
        /* the self-attention's input (norm1(x) with pre-norm), its [CLS] rows as the queries;
         * no dropout (the probabilities before it), the layer's own stream untouched */
        const float *in = x;
        if (l->pre) {
            attn__ln_fwd(ctx, &l->norm[ATTN__SUB_SELF], x, n, B * L);
            in = n;
        }
        for (int64_t b = 0; b < B; b++)
            memcpy(q + b * E, in + b * L * E, (size_t)E * sizeof(float));
        const attn__attn_io io = attn__attn_io_mha(q, in, in, B, 1, L, NULL, NULL, 0, NULL);
        ATTN_TRYG(
            attn__attention_fwd(ctx, &l->at[0], &io, o, NULL, w + i * B * H * L, 0, NULL));
        attn__block_io bio;
        memset(&bio, 0, sizeof bio);
        bio.B = B, bio.T = L, bio.rng = &rng;
        ATTN_TRYG(attn__block_fwd(ctx, l, x, x, &bio, NULL));
    }
    attn__store(w, cls_attn);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* ---- training forward and backward ---------------------------------------------------- */

/* The record of a ViT forward. */
typedef struct vit_rec {
    int64_t B;
    float *patches;       /* [B, N, P]: the projection's input */
    attn__rng drop;       /* the stream at the embedding dropout */
    attn__stack_saved st; /* st.out: the final norm's output, whose [CLS] rows feed the head */
} vit_rec;

/* Embeds images (checked) and runs the stack, recording into rec (buffers from t, NULL: the
 * caller's workspace frame). */
static attn_status vit_fwd_rec(attn_ctx *ctx, const vit *v, const attn_tensor *images,
                               const attn_run *run, attn__tape *t, int ckpt, vit_rec *rec) {
    int64_t B = 0, E = v->s.cfg.d_model, L = v->N + 1;
    ATTN_TRY(vit_images(ctx, v, images, &B));
    float *x;
    attn__rng rng = attn__rng_from(run);
    rng.nb = B;
    rec->B = B;
    ATTN_TRY(attn__rec_f32(ctx, t, &rec->patches, B, v->N, v->emb.P, 1));
    ATTN_TRY(attn__ws_f32(ctx, &x, B, L, E, 1)); /* copied by the stack's record */
    ATTN_TRY(vit_embed_images(ctx, v, images, B, rec->patches, x));
    rec->drop = rng;
    attn__dropout(&rng, v->s.cfg.dropout, x, B * L * E);
    return attn__stack_fwd_rec(ctx, &v->s, 0, ckpt, t, x, NULL, B, L, 0, NULL, NULL, NULL, NULL,
                               0, &rng, &rec->st, NULL);
}

/* dl [B, K] contiguous: the head, the stack, the embedding dropout, the embedding; di
 * [B, C, H, W] contiguous (NULL: not wanted) is overwritten with the images' gradient. */
static attn_status vit_bwd_rec(attn_ctx *ctx, const vit *v, const attn__gmap *g,
                               const vit_rec *rec, const float *dl, float *di) {
    int64_t B = rec->B, E = v->s.cfg.d_model, L = v->N + 1, n = B * L * E;
    attn__mark mk = attn__ws_mark(ctx);
    float *dx, *d0, *dc, *dp = NULL;
    attn_status st;
    ATTN_TRYG(attn__ws_f32(ctx, &dx, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &d0, B, L, E, 1));
    ATTN_TRYG(attn__ws_f32(ctx, &dc, B, E, 1, 1));
    if (di) ATTN_TRYG(attn__ws_f32(ctx, &dp, B, v->N, v->emb.P, 1));
    /* the head read the [CLS] rows only: the other rows' gradient is 0 */
    ATTN_TRYG(attn__matmul_bwd(ctx, ATTN__W32(v->head.weight, NULL, v->K, E), rec->st.out, L * E,
                               dl, v->K, dc, E, 0, NULL, attn__g(g, v->head.weight),
                               attn__g(g, v->head.bias), B));
    attn__grad_ready(ctx, v->head.weight - g->arena, v->K * E + v->K); /* the head and its bias */
    memset(dx, 0, (size_t)n * sizeof(float));
    for (int64_t b = 0; b < B; b++) memcpy(dx + b * L * E, dc + b * E, (size_t)E * sizeof(float));
    ATTN_TRYG(attn__stack_bwd_rec(ctx, &v->s, g, &rec->st, dx, d0, NULL));
    attn__rng r = rec->drop;
    attn__dropout(&r, v->s.cfg.dropout, d0, n);
    ATTN_TRYG(embed_bwd(ctx, &v->emb, g, rec->patches, B, v->N, d0, dp));
    if (di) unpatchify(v, dp, B, di);
done:
    attn__ws_release(ctx, mk);
    return st;
}

/* dlogits [B, K] checked and made contiguous. */
static attn_status vit_dlogits(attn_ctx *ctx, const vit *v, int64_t B,
                               const attn_tensor *dlogits, const float **dl) {
    ATTN_TRY(attn__check(ctx, dlogits, "dlogits", ATTN_F32, 2, 2));
    int64_t shape[2] = {B, v->K};
    ATTN_TRY(attn__check_shape(ctx, dlogits, "dlogits", 2, shape));
    ATTN_TRY(attn__check_finite(ctx, dlogits, "dlogits", 0));
    return attn__contig(ctx, dlogits, dl);
}

/* dimages (NULL or no data: not wanted) checked as [B, C, H, W] F32 and disjoint from the
 * inputs; *want receives whether it is wanted. */
static attn_status vit_dimages(attn_ctx *ctx, const attn_module *m, const vit *v,
                               const char *fn, int64_t B, const attn_tensor *images,
                               const attn_tensor *dlogits, const attn_tensor *dimages,
                               int *want) {
    *want = dimages && dimages->data;
    if (!*want) return ATTN_OK;
    ATTN_TRY(attn__check(ctx, dimages, "dimages", ATTN_F32, 4, 4));
    int64_t shape[4] = {B, v->C, v->img, v->img};
    ATTN_TRY(attn__check_shape(ctx, dimages, "dimages", 4, shape));
    attn_tensor P = attn_view1(m->arena, m->numel), G = attn_view1(m->grad, m->numel);
    attn__arg oa[] = {{dimages, "dimages", 0}},
              ia[] = {{images, "images", 0}, {dlogits, "dlogits", 0},
                      {&P, "the module's parameters", 0}, {&G, "the module's gradients", 0}};
    return attn__check_outputs(ctx, fn, oa, 1, ia, 4);
}

attn_status attn_vit_backward(attn_ctx *ctx, const attn_module *m, const attn_tensor *images,
                              const attn_run *run, const attn_tensor *dlogits,
                              attn_tensor *dimages) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT, "attn_vit_backward"));
    const vit *v = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    int64_t B = 0;
    int want;
    ATTN_TRY(vit_images(ctx, v, images, &B));
    ATTN_TRY(vit_dimages(ctx, m, v, "attn_vit_backward", B, images, dlogits, dimages, &want));
    attn__mark mk = attn__ws_mark(ctx);
    const float *dl;
    float *di = NULL;
    vit_rec rec;
    attn_status st;
    ATTN_TRYG(vit_dlogits(ctx, v, B, dlogits, &dl));
    if (want) ATTN_TRYG(attn__ws_f32(ctx, &di, B, v->C, v->img, v->img));
    /* recompute: a checkpointed record (each layer's input) in the workspace */
    ATTN_TRYG(vit_fwd_rec(ctx, v, images, run, NULL, 1, &rec));
    ATTN_TRYG(vit_bwd_rec(ctx, v, &g, &rec, dl, di));
    if (di) attn__store(di, dimages);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_forward_train(attn_ctx *ctx, const attn_module *m,
                                   const attn_tensor *images, const attn_run *run,
                                   attn_tensor *logits, attn_saved *saved) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT, "attn_vit_forward_train"));
    ATTN_FAIL_IF(!saved, ctx, ATTN_E_INVALID, "saved is NULL");
    attn__saved_begin(saved);
    const vit *v = m->impl;
    int64_t B = 0;
    ATTN_TRY(vit_images(ctx, v, images, &B));
    ATTN_TRY(vit_logits_out(ctx, m, v, "attn_vit_forward_train", images, B, logits));
    attn__mark mk = attn__ws_mark(ctx);
    vit_rec *rec;
    float *y;
    attn_status st;
    ATTN_TRYG(attn__tape_alloc(ctx, &saved->tape, 1, sizeof *rec, (void **)&rec));
    ATTN_TRYG(vit_fwd_rec(ctx, v, images, run, &saved->tape,
                          (saved->flags & ATTN_SAVED_CHECKPOINT) != 0, rec));
    ATTN_TRYG(attn__ws_f32(ctx, &y, B, v->K, 1, 1));
    ATTN_TRYG(vit_head(ctx, v, rec->st.out, B, y));
    attn__store(y, logits);
    attn__saved_end(saved, m, rec);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_backward_saved(attn_ctx *ctx, const attn_module *m,
                                    const attn_saved *saved, const attn_tensor *dlogits,
                                    attn_tensor *dimages) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT, "attn_vit_backward_saved"));
    const vit *v = m->impl;
    attn__gmap g;
    ATTN_TRY(attn__module_gmap(ctx, m, &g));
    vit_rec *rec;
    ATTN_TRY(attn__saved_get(ctx, saved, m, "attn_vit_backward_saved", (void **)&rec));
    int want;
    ATTN_TRY(vit_dimages(ctx, m, v, "attn_vit_backward_saved", rec->B, NULL, dlogits, dimages,
                         &want));
    attn__mark mk = attn__ws_mark(ctx);
    const float *dl;
    float *di = NULL;
    attn_status st;
    ATTN_TRYG(vit_dlogits(ctx, v, rec->B, dlogits, &dl));
    if (want) ATTN_TRYG(attn__ws_f32(ctx, &di, rec->B, v->C, v->img, v->img));
    ATTN_TRYG(vit_bwd_rec(ctx, v, &g, rec, dl, di));
    if (di) attn__store(di, dimages);
done:
    attn__ws_release(ctx, mk);
    return st;
}
