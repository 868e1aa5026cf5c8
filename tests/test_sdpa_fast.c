/* The layers' SDPA kernels (attn__sdpa, attn__sdpa_bwd: row kernels for small problems, the
 * fused ones from 64 x 64) against the reference kernels on random shapes with masks, GQA, both causal alignments and dropout, and bit-identical results for
 * 1, 2 and 3 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/kernels.h"
#include "testutil.h"

int main(void) {
    attn_ctx *ctx[3] = {tu_ctx(1), tu_ctx(2), tu_ctx(3)};
    uint64_t rs = 777;
    const int64_t sizes[] = {1, 2, 3, 5, 8, 13, 17, 32, 70, 100};
    for (int t = 0; t < 80 && !tu_failures; t++) {
        int64_t B = 1 + (int64_t)(tu_rand(&rs) % 3), Hkv = 1 + (int64_t)(tu_rand(&rs) % 2);
        int64_t H = Hkv * (1 + (int64_t)(tu_rand(&rs) % 3));
        int64_t L = sizes[tu_rand(&rs) % 10], S = sizes[tu_rand(&rs) % 10];
        int64_t D = sizes[tu_rand(&rs) % 8], Dv = sizes[tu_rand(&rs) % 8];
        size_t nq = (size_t)(B * H * L * D), nk = (size_t)(B * Hkv * S * D),
               nv = (size_t)(B * Hkv * S * Dv), no = (size_t)(B * H * L * Dv),
               nw = (size_t)(B * H * L * S);
        float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *dout = malloc(4 * no);
        tu_fill(q, nq, 10 + t, -2, 2), tu_fill(k, nk, 20 + t, -2, 2), tu_fill(v, nv, 30 + t, -1, 1);
        tu_fill(dout, no, 40 + t, -1, 1);
        unsigned char *kpm = malloc((size_t)(B * S));
        for (int64_t i = 0; i < B * S; i++) kpm[i] = (tu_rand(&rs) % 5) == 0;
        attn__sdpa_args a;
        memset(&a, 0, sizeof a);
        a.B = B, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
        a.q = q, a.qs[0] = H * L * D, a.qs[1] = L * D, a.qs[2] = D, a.qs[3] = 1;
        a.k = k, a.ks[0] = Hkv * S * D, a.ks[1] = S * D, a.ks[2] = D, a.ks[3] = 1;
        a.v = v, a.vs[0] = Hkv * S * Dv, a.vs[1] = S * Dv, a.vs[2] = Dv, a.vs[3] = 1;
        a.os[0] = H * L * Dv, a.os[1] = L * Dv, a.os[2] = Dv, a.os[3] = 1;
        a.ws[0] = H * L * S, a.ws[1] = L * S, a.ws[2] = S, a.ws[3] = 1;
        a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
        if (t % 2) { /* a key padding mask [B, S] */
            a.mask[1].kind = ATTN_MASK_BLOCK, a.mask[1].data = kpm, a.mask[1].dtype = ATTN_BOOL;
            a.mask[1].stride[0] = S, a.mask[1].stride[3] = 1;
            a.mask_ncols[1] = S;
        }
        a.causal = (attn_causal)(t % 3);
        a.scale = 1.0f / sqrtf((float)D);
        if (t % 4 == 3) a.dropout_p = 0.3f, a.seed = 5, a.offset = (uint64_t)t;
        float *ref[3], *out[3][3], *grads[3][3], *gref[3];
        size_t nout[3] = {no, nw, (size_t)(B * H * L)}, ng[3] = {nq, nk, nv};
        for (int i = 0; i < 3; i++) {
            ref[i] = calloc(nout[i], 4), gref[i] = calloc(ng[i], 4);
            for (int c = 0; c < 3; c++) out[c][i] = calloc(nout[i], 4), grads[c][i] = calloc(ng[i], 4);
        }
        float *scratch = malloc(4 * 4 * (size_t)S);
        attn__sdpa_args r = a;
        r.o = ref[0], r.w = ref[1], r.lse = ref[2];
        attn__sdpa_ref(&r, scratch);
        attn__sdpa_grads g;
        memset(&g, 0, sizeof g);
        g.dout = dout, memcpy(g.dos, a.os, sizeof g.dos);
        memcpy(g.dqs, a.qs, sizeof g.dqs), memcpy(g.dks, a.ks, sizeof g.dks), memcpy(g.dvs, a.vs, sizeof g.dvs);
        attn__sdpa_grads gr = g;
        gr.dq = gref[0], gr.dk = gref[1], gr.dv = gref[2];
        attn__sdpa_bwd_ref(&r, &gr, scratch);
        for (int c = 0; c < 3; c++) {
            attn__sdpa_args f = a;
            f.o = out[c][0], f.w = out[c][1], f.lse = out[c][2];
            TU_STATUS(attn__sdpa(ctx[c], &f), ATTN_OK, ctx[c]);
            /* without the weights output large problems take the fused kernel: same result */
            attn__sdpa_args f2 = a;
            float *o2 = calloc(no, 4), *l2 = calloc((size_t)(B * H * L), 4);
            f2.o = o2, f2.lse = l2, f2.w = NULL;
            TU_STATUS(attn__sdpa(ctx[c], &f2), ATTN_OK, ctx[c]);
            tu_close("out (no weights)", o2, ref[0], no, 2e-5);
            tu_close("lse (no weights)", l2, ref[2], (size_t)(B * H * L), 2e-5);
            free(o2), free(l2);
            attn__sdpa_grads gf = g;
            gf.dq = grads[c][0], gf.dk = grads[c][1], gf.dv = grads[c][2];
            TU_STATUS(attn__sdpa_bwd(ctx[c], &f, &gf), ATTN_OK, ctx[c]);
        }
        const char *on[3] = {"out", "weights", "lse"}, *gn[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++) {
            tu_close(on[i], out[0][i], ref[i], nout[i], 1e-5);
            tu_close(gn[i], grads[0][i], gref[i], ng[i], 1e-4);
            for (int c = 1; c < 3; c++) {
                TU_CHECK(memcmp(out[c][i], out[0][i], 4 * nout[i]) == 0, "%s differs with %d threads", on[i], c + 1);
                TU_CHECK(memcmp(grads[c][i], grads[0][i], 4 * ng[i]) == 0, "%s differs with %d threads", gn[i], c + 1);
            }
        }
        for (int i = 0; i < 3; i++) {
            free(ref[i]), free(gref[i]);
            for (int c = 0; c < 3; c++) free(out[c][i]), free(grads[c][i]);
        }
        free(q), free(k), free(v), free(dout), free(kpm), free(scratch);
    }
    for (int c = 0; c < 3; c++) attn_ctx_free(ctx[c]);
    return tu_finish("test_sdpa_fast");
}
