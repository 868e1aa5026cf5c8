/* attn_sdpa_varlen and its backward: packed sequences against the reference kernel run on each
 * sequence copied out on its own (contiguous [1, H, Lb, D] buffers), with the dropout range of
 * each sequence computed here from the documented formula; empty sequences; 1 vs 2 threads bit
 * for bit; bad offsets refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/kernels.h"
#include "testutil.h"

/* Rows [r0, r0+n) of packed x [T, H, d] into dst [H, n, d]. */
static void unpack(const float *x, int64_t H, int64_t d, int64_t r0, int64_t n, float *dst) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (h * n + i) * d, x + ((r0 + i) * H + h) * d, (size_t)d * sizeof(float));
}
static void pack(const float *src, int64_t H, int64_t d, int64_t r0, int64_t n, float *x) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < n; i++)
            memcpy(x + ((r0 + i) * H + h) * d, src + (h * n + i) * d, (size_t)d * sizeof(float));
}

static void set4(int64_t *st, int64_t a, int64_t b, int64_t c) {
    st[0] = a * b * c, st[1] = b * c, st[2] = c, st[3] = 1;
}

typedef struct {
    int64_t B, H, Hkv, D, Dv, Tq, Tk;
    int64_t cq[6], ck[6];
    float *q, *k, *v, *dout;
} problem;

/* The expected results: per sequence, the reference kernels on copies. */
static void expect(const problem *p, const attn_sdpa_options *opt, float *out, float *lse,
                   float *dq, float *dk, float *dv) {
    uint64_t base = 0;
    memset(out, 0, sizeof(float) * (size_t)(p->Tq * p->H * p->Dv));
    memset(dq, 0, sizeof(float) * (size_t)(p->Tq * p->H * p->D));
    memset(dk, 0, sizeof(float) * (size_t)(p->Tk * p->Hkv * p->D));
    memset(dv, 0, sizeof(float) * (size_t)(p->Tk * p->Hkv * p->Dv));
    for (int64_t i = 0; i < p->H * p->Tq; i++) lse[i] = -INFINITY;
    for (int64_t b = 0; b < p->B; b++) {
        int64_t r0 = p->cq[b], L = p->cq[b + 1] - r0, c0 = p->ck[b], S = p->ck[b + 1] - c0;
        if (L == 0 || S == 0) continue;
        int64_t H = p->H, Hkv = p->Hkv, D = p->D, Dv = p->Dv;
        float *q = malloc(sizeof(float) * (size_t)(H * L * D)),
              *k = malloc(sizeof(float) * (size_t)(Hkv * S * D)),
              *v = malloc(sizeof(float) * (size_t)(Hkv * S * Dv)),
              *o = malloc(sizeof(float) * (size_t)(H * L * Dv)),
              *g = malloc(sizeof(float) * (size_t)(H * L * Dv)),
              *l = malloc(sizeof(float) * (size_t)(H * L)),
              *gq = malloc(sizeof(float) * (size_t)(H * L * D)),
              *gk = malloc(sizeof(float) * (size_t)(Hkv * S * D)),
              *gv = malloc(sizeof(float) * (size_t)(Hkv * S * Dv)),
              *scratch = malloc(sizeof(float) * (size_t)(4 * S));
        unpack(p->q, H, D, r0, L, q), unpack(p->k, Hkv, D, c0, S, k);
        unpack(p->v, Hkv, Dv, c0, S, v), unpack(p->dout, H, Dv, r0, L, g);
        attn__sdpa_args a;
        memset(&a, 0, sizeof a);
        a.B = 1, a.H = H, a.Hkv = Hkv, a.L = L, a.S = S, a.D = D, a.Dv = Dv;
        a.q = q, a.k = k, a.v = v, a.o = o, a.lse = l;
        set4(a.qs, H, L, D), set4(a.ks, Hkv, S, D), set4(a.vs, Hkv, S, Dv), set4(a.os, H, L, Dv);
        a.ls[0] = H * L, a.ls[1] = L, a.ls[2] = 1;
        a.causal = opt->causal;
        a.scale = 1.0f / sqrtf((float)D);
        a.dropout_p = opt->dropout_p, a.seed = opt->seed, a.offset = opt->offset;
        a.drop_base = base;
        attn__sdpa_ref(&a, scratch);
        attn__sdpa_grads gr;
        memset(&gr, 0, sizeof gr);
        gr.dout = g, gr.dq = gq, gr.dk = gk, gr.dv = gv;
        set4(gr.dos, H, L, Dv), set4(gr.dqs, H, L, D), set4(gr.dks, Hkv, S, D),
            set4(gr.dvs, Hkv, S, Dv);
        attn__sdpa_bwd_ref(&a, &gr, scratch);
        pack(o, H, Dv, r0, L, out), pack(gq, H, D, r0, L, dq);
        pack(gk, Hkv, D, c0, S, dk), pack(gv, Hkv, Dv, c0, S, dv);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) lse[h * p->Tq + r0 + i] = l[h * L + i];
        base += (uint64_t)(H * L * S);
        free(q), free(k), free(v), free(o), free(g), free(l), free(gq), free(gk), free(gv);
        free(scratch);
    }
}

static int lse_close(const float *got, const float *ref, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (isinf(ref[i]) ? got[i] != ref[i] : !(fabsf(got[i] - ref[i]) <= 1e-5f * (1 + fabsf(ref[i]))))
            return 0;
    }
    return 1;
}

int main(void) {
    attn_ctx *c1 = tu_ctx(1), *c2 = tu_ctx(2);
    uint64_t rs = 4242;
    const int64_t lens[] = {0, 1, 5, 64, 97, 130};
    for (int t = 0; t < 40 && !tu_failures; t++) {
        problem p;
        memset(&p, 0, sizeof p);
        p.B = 1 + (int64_t)(tu_rand(&rs) % 5);
        p.Hkv = 1 + (int64_t)(tu_rand(&rs) % 2), p.H = p.Hkv * (1 + (int64_t)(tu_rand(&rs) % 3));
        p.D = 8 + 8 * (int64_t)(tu_rand(&rs) % 3), p.Dv = 4 + 12 * (int64_t)(tu_rand(&rs) % 2);
        for (int64_t b = 0; b < p.B; b++) {
            p.cq[b + 1] = p.cq[b] + lens[tu_rand(&rs) % 6];
            p.ck[b + 1] = p.ck[b] + lens[tu_rand(&rs) % 6];
        }
        if (p.cq[p.B] == 0) p.cq[p.B] = p.cq[p.B - 1] + 3; /* tensors need >= 1 row */
        if (p.ck[p.B] == 0) p.ck[p.B] = p.ck[p.B - 1] + 2;
        p.Tq = p.cq[p.B], p.Tk = p.ck[p.B];
        size_t nq = (size_t)(p.Tq * p.H * p.D), nk = (size_t)(p.Tk * p.Hkv * p.D),
               nv = (size_t)(p.Tk * p.Hkv * p.Dv), no = (size_t)(p.Tq * p.H * p.Dv),
               nl = (size_t)(p.H * p.Tq);
        p.q = malloc(4 * nq), p.k = malloc(4 * nk), p.v = malloc(4 * nv), p.dout = malloc(4 * no);
        tu_fill(p.q, nq, 10 + t, -2, 2), tu_fill(p.k, nk, 20 + t, -2, 2);
        tu_fill(p.v, nv, 30 + t, -1, 1), tu_fill(p.dout, no, 40 + t, -1, 1);
        attn_sdpa_options o = attn_sdpa_defaults();
        o.causal = (attn_causal)(t % 3);
        if (t % 4 == 3) o.dropout_p = 0.25f, o.seed = 99 + (uint64_t)t, o.offset = 5;
        float *eo = malloc(4 * no), *el = malloc(4 * nl), *edq = malloc(4 * nq),
              *edk = malloc(4 * nk), *edv = malloc(4 * nv);
        expect(&p, &o, eo, el, edq, edk, edv);
        float *go[2], *gl[2], *gq[2], *gk[2], *gv[2];
        int64_t cq32[6];
        for (int b = 0; b < 6; b++) cq32[b] = p.cq[b];
        int32_t ck32[6];
        for (int b = 0; b < 6; b++) ck32[b] = (int32_t)p.ck[b];
        attn_tensor tq = attn_view3(p.q, p.Tq, p.H, p.D), tk = attn_view3(p.k, p.Tk, p.Hkv, p.D),
                    tv = attn_view3(p.v, p.Tk, p.Hkv, p.Dv),
                    tg = attn_view3(p.dout, p.Tq, p.H, p.Dv);
        int64_t n1 = p.B + 1;
        attn_tensor cuq = attn_tensor_make(cq32, ATTN_I64, 1, &n1),
                    cuk = attn_tensor_make(ck32, ATTN_I32, 1, &n1);
        for (int r = 0; r < 2; r++) {
            attn_ctx *c = r ? c2 : c1;
            go[r] = malloc(4 * no), gl[r] = malloc(4 * nl), gq[r] = malloc(4 * nq);
            gk[r] = malloc(4 * nk), gv[r] = malloc(4 * nv);
            /* garbage first: every output element must be written */
            for (size_t i = 0; i < no; i++) go[r][i] = NAN;
            for (size_t i = 0; i < nq; i++) gq[r][i] = NAN;
            for (size_t i = 0; i < nk; i++) gk[r][i] = NAN;
            for (size_t i = 0; i < nv; i++) gv[r][i] = NAN;
            attn_tensor to = attn_view3(go[r], p.Tq, p.H, p.Dv), tl = attn_view2(gl[r], p.H, p.Tq),
                        tdq = attn_view3(gq[r], p.Tq, p.H, p.D),
                        tdk = attn_view3(gk[r], p.Tk, p.Hkv, p.D),
                        tdv = attn_view3(gv[r], p.Tk, p.Hkv, p.Dv);
            TU_STATUS(attn_sdpa_varlen(c, &tq, &tk, &tv, &cuq, &cuk, &o, &to, &tl), ATTN_OK, c);
            TU_STATUS(attn_sdpa_varlen_backward(c, &tq, &tk, &tv, &cuq, &cuk, &o, &tg, &tdq, &tdk,
                                                &tdv),
                      ATTN_OK, c);
        }
        char what[96];
        snprintf(what, sizeof what, "case %d out", t);
        tu_close(what, go[0], eo, no, 2e-5);
        snprintf(what, sizeof what, "case %d dq", t);
        tu_close(what, gq[0], edq, nq, 1e-4);
        snprintf(what, sizeof what, "case %d dk", t);
        tu_close(what, gk[0], edk, nk, 1e-4);
        snprintf(what, sizeof what, "case %d dv", t);
        tu_close(what, gv[0], edv, nv, 1e-4);
        TU_CHECK(lse_close(gl[0], el, (int64_t)nl), "case %d lse", t);
        TU_CHECK(!memcmp(go[0], go[1], 4 * no) && !memcmp(gl[0], gl[1], 4 * nl) &&
                     !memcmp(gq[0], gq[1], 4 * nq) && !memcmp(gk[0], gk[1], 4 * nk) &&
                     !memcmp(gv[0], gv[1], 4 * nv),
                 "case %d: 1 and 2 threads differ", t);
        for (int r = 0; r < 2; r++) free(go[r]), free(gl[r]), free(gq[r]), free(gk[r]), free(gv[r]);
        free(eo), free(el), free(edq), free(edk), free(edv);
        free(p.q), free(p.k), free(p.v), free(p.dout);
    }

    /* bad offsets */
    {
        float q[4 * 2 * 8] = {0}, kv[5 * 2 * 8] = {0}, out[4 * 2 * 8];
        attn_tensor tq = attn_view3(q, 4, 2, 8), tk = attn_view3(kv, 5, 2, 8),
                    to = attn_view3(out, 4, 2, 8);
        int64_t n3 = 3, n2 = 2;
        int32_t good_q[3] = {0, 1, 4}, good_k[3] = {0, 2, 5}, start1[3] = {1, 1, 4},
                down[3] = {0, 3, 2}, shortq[3] = {0, 1, 3};
        float fcu[3] = {0, 1, 4};
        attn_tensor gq = attn_tensor_make(good_q, ATTN_I32, 1, &n3),
                    gk = attn_tensor_make(good_k, ATTN_I32, 1, &n3),
                    s1 = attn_tensor_make(start1, ATTN_I32, 1, &n3),
                    dn = attn_tensor_make(down, ATTN_I32, 1, &n3),
                    sq = attn_tensor_make(shortq, ATTN_I32, 1, &n3),
                    fc = attn_tensor_make(fcu, ATTN_F32, 1, &n3),
                    two = attn_tensor_make(good_q, ATTN_I32, 1, &n2);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &gq, &gk, NULL, &to, NULL), ATTN_OK, c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &s1, &gk, NULL, &to, NULL), ATTN_E_INVALID,
                  c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &gq, &dn, NULL, &to, NULL), ATTN_E_INVALID,
                  c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &sq, &gk, NULL, &to, NULL), ATTN_E_SHAPE,
                  c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &fc, &gk, NULL, &to, NULL), ATTN_E_DTYPE,
                  c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &two, &gk, NULL, &to, NULL), ATTN_E_SHAPE,
                  c1);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, NULL, &gk, NULL, &to, NULL), ATTN_E_INVALID,
                  c1);
        attn_tensor bad_out = attn_view3(out, 4, 2, 4);
        TU_STATUS(attn_sdpa_varlen(c1, &tq, &tk, &tk, &gq, &gk, NULL, &bad_out, NULL), ATTN_E_SHAPE,
                  c1);
        TU_STATUS(attn_sdpa_varlen(NULL, &tq, &tk, &tk, &gq, &gk, NULL, &to, NULL), ATTN_E_INVALID,
                  NULL);
    }
    attn_ctx_free(c1);
    attn_ctx_free(c2);
    return tu_finish("test_varlen");
}
