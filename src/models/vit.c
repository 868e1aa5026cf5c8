/* The ViT-style input embedding (seed 003): a [CLS] token, then each patch projected, plus
 * learned positions; forward and backward. */
#include <string.h>

#include "../layers/layers.h"

/* ---- ViT-style input (seed 003) ------------------------------------------------------ */
typedef struct vit {
    int64_t P, E, N;
    float *cls, *pos;
    attn__lin proj;
} vit;

attn_status attn_vit_embed_create(attn_ctx *ctx, int64_t patch_dim, int64_t E,
                                  int64_t max_patches, attn_module **out) {
    if (!ctx || !out) return attn__fail(ctx, ATTN_E_INVALID, "NULL argument");
    *out = NULL;
    ATTN_FAIL_IF(patch_dim <= 0 || E <= 0 || max_patches <= 0 || max_patches == INT64_MAX, ctx,
                 ATTN_E_INVALID, "patch_dim, embed_dim and max_patches must be positive");
    attn_module *m;
    ATTN_TRY(attn__module_new(ctx, ATTN__VIT_EMBED, sizeof(vit), &m));
    vit *v = m->impl;
    v->P = patch_dim, v->E = E, v->N = max_patches;
    attn_status st = attn__param_reg(ctx, m, "", "cls_token", &v->cls, 0, 3, 1, 1, E);
    attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    if (st == ATTN_OK) st = attn__lin_reg(ctx, m, "", "proj", &v->proj, patch_dim, E, 1);
    if (st == ATTN_OK) {
        st = attn__param_reg(ctx, m, "", "pos_embed", &v->pos, 0, 3, 1, max_patches + 1, E);
        attn__param_init_last(m, ATTN__INIT_NORMAL, 0.02);
    }
    return attn__module_done(ctx, m, st, out);
}

attn_status attn_vit_embed_forward(attn_ctx *ctx, const attn_module *m,
                                   const attn_tensor *patches, attn_tensor *z) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_forward"));
    const vit *v = m->impl;
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
    for (int64_t b = 0; b < B; b++) {
        float *zb = zp + b * (N + 1) * v->E;
        memcpy(zb, v->cls, (size_t)v->E * sizeof(float));
        ATTN_TRYG(attn__lin_fwd(ctx, &v->proj, p + b * N * v->P, zb + v->E, N));
        for (int64_t i = 0; i < (N + 1) * v->E; i++) zb[i] += v->pos[i];
    }
    attn__store(zp, z);
done:
    attn__ws_release(ctx, mk);
    return st;
}

attn_status attn_vit_embed_backward(attn_ctx *ctx, const attn_module *m,
                                    const attn_tensor *patches, const attn_tensor *dz,
                                    attn_tensor *dpatches) {
    ATTN_TRY(attn__module_expect(ctx, m, ATTN__VIT_EMBED, "attn_vit_embed_backward"));
    const vit *v = m->impl;
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
    float *gcls = attn__g(&g, v->cls), *gpos = attn__g(&g, v->pos);
    for (int64_t b = 0; b < B; b++) {
        const float *db = d + b * (N + 1) * E;
        for (int64_t e = 0; e < E; e++) gcls[e] += db[e];
        for (int64_t i = 0; i < (N + 1) * E; i++) gpos[i] += db[i];
        ATTN_TRYG(attn__linear_bwd(ctx, p + b * N * v->P, v->P, v->proj.weight, db + E, E,
                             dp ? dp + b * N * v->P : NULL, v->P, attn__g(&g, v->proj.weight),
                             attn__g(&g, v->proj.bias), N, v->P, E));
    }
    if (dp) attn__seq_out_end(dp, dpatches);
done:
    attn__ws_release(ctx, mk);
    return st;
}
