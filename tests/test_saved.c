/* Saved activations (attn_saved, *_forward_train, *_backward_saved): for multi-head attention,
 * the encoder layer and stack, the decoder layer and stack, nn.Transformer, GPT, seq2seq and ViT,
 * pre- and post-norm, dropout off and on,
 * masks (bool, additive, padding) and causal, on the row kernels and the fused ones:
 *  - the training forward's output is bit-identical to the forward's;
 *  - the saved backward's input and parameter gradients match the recomputing backward's
 *    (1e-5 of max|grad|; the maximum error and whether the bits agree are printed);
 *  - checkpointing (ATTN_SAVED_CHECKPOINT) gives the same bits as full saving, and 3 threads
 *    the same bits as 1;
 *  - the record is the backward's only input: the caller's inputs and masks are overwritten
 *    between the forward and the backward, and a second backward gives the same bits;
 *  - the tape's memory goes through the hooks of the creating context and is all freed (a
 *    counting allocator), out-of-memory leaves nothing recorded, sizes are overflow-checked;
 *  - misuse (no record, another module's record, wrong dout shape) is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/layers/layers.h"
#include "testutil.h"

enum { K_ENC, K_ENCS, K_DEC, K_DECS, K_GPT, K_S2S, K_MHA, K_TF, K_VIT };

typedef struct {
    char name[96];
    int kind;
    attn_module *m;
    attn_tensor x, mem, val;  /* float inputs: src or tgt, memory (MHA: query, key, value;
                                 nn.Transformer: src, tgt) */
    attn_tensor ids, ids2;    /* GPT ids; seq2seq src and tgt */
    attn_mask m1, m2, m3, m4; /* encoder: mask, kpm; decoder and nn.Transformer: tgt_mask,
                                 memory_mask, tgt_kpm, memory_kpm (also the src kpm); MHA:
                                 attn_mask, key_padding_mask */
    attn_mha_options mo;
    attn_tensor w;            /* MHA weights (need_weights) */
    int causal;
    attn_run run;
    attn_tensor out;          /* output shape (data set per run) */
    float *cot;               /* dout / dlogits */
} tcase;

typedef struct {
    float *out, *grad, *dx, *dmem, *dval;
    size_t nout, ngrad, nx, nmem, nval;
    size_t bytes; /* attn_saved_bytes after the forward */
} result;

static double worst_rel = 0; /* over every case: max |saved - recomputed| / max |recomputed| */
static int n_identical = 0, n_compared = 0;

static const attn_mask *mo(const attn_mask *m) { return m->kind ? m : NULL; }

/* The Transformer family's masks of a case (see tcase's m1..m4). */
static attn_transformer_masks tf_masks(const tcase *c) {
    attn_transformer_masks k = {0};
    if (c->kind == K_ENC || c->kind == K_ENCS) {
        k.src_mask = mo(&c->m1), k.src_key_padding_mask = mo(&c->m2);
        k.src_is_causal = c->causal;
        return k;
    }
    k.tgt_mask = mo(&c->m1), k.memory_mask = mo(&c->m2);
    k.tgt_key_padding_mask = mo(&c->m3), k.memory_key_padding_mask = mo(&c->m4);
    k.tgt_is_causal = c->causal;
    if (c->kind == K_TF) k.src_key_padding_mask = mo(&c->m4);
    return k;
}

static attn_status fwd(attn_ctx *ctx, tcase *c, attn_tensor *out, attn_saved *sv) {
    attn_transformer_masks k = tf_masks(c);
    switch (c->kind) {
    case K_ENC:
        return sv ? attn_encoder_layer_forward_train(ctx, c->m, &c->x, &k, &c->run, out, sv)
                  : attn_encoder_layer_forward(ctx, c->m, &c->x, &k, &c->run, out);
    case K_ENCS:
        return sv ? attn_encoder_forward_train(ctx, c->m, &c->x, &k, &c->run, out, sv)
                  : attn_encoder_forward(ctx, c->m, &c->x, &k, &c->run, out);
    case K_DEC:
        return sv ? attn_decoder_layer_forward_train(ctx, c->m, &c->x, &c->mem, &k, &c->run, out,
                                                     sv)
                  : attn_decoder_layer_forward(ctx, c->m, &c->x, &c->mem, &k, &c->run, out);
    case K_DECS:
        return sv ? attn_decoder_forward_train(ctx, c->m, &c->x, &c->mem, &k, &c->run, out, sv)
                  : attn_decoder_forward(ctx, c->m, &c->x, &c->mem, &k, &c->run, out);
    case K_GPT:
        return sv ? attn_gpt_forward_train(ctx, c->m, &c->ids, &c->run, out, sv)
                  : attn_gpt_forward(ctx, c->m, &c->ids, &c->run, out);
    case K_S2S:
        return sv ? attn_seq2seq_forward_train(ctx, c->m, &c->ids, &c->ids2, &c->run, out, sv)
                  : attn_seq2seq_forward(ctx, c->m, &c->ids, &c->ids2, &c->run, out, NULL);
    case K_MHA:
        return sv ? attn_mha_forward_train(ctx, c->m, &c->x, &c->mem, &c->val, mo(&c->m2),
                                           mo(&c->m1), &c->mo, &c->run, out,
                                           c->mo.need_weights ? &c->w : NULL, sv)
                  : attn_mha_forward(ctx, c->m, &c->x, &c->mem, &c->val, mo(&c->m2), mo(&c->m1),
                                     &c->mo, &c->run, out, c->mo.need_weights ? &c->w : NULL);
    case K_VIT:
        return sv ? attn_vit_forward_train(ctx, c->m, &c->x, &c->run, out, sv)
                  : attn_vit_forward(ctx, c->m, &c->x, &c->run, out);
    case K_TF:
        return sv ? attn_transformer_forward_train(ctx, c->m, &c->x, &c->mem, &k, &c->run, out,
                                                   sv)
                  : attn_transformer_forward(ctx, c->m, &c->x, &c->mem, &k, &c->run, out);
    }
    return ATTN_E_INVALID;
}

static attn_status bwd(attn_ctx *ctx, tcase *c, const attn_tensor *dout, attn_saved *sv,
                       attn_tensor *dx, attn_tensor *dmem, attn_tensor *dval) {
    attn_transformer_masks k = tf_masks(c);
    switch (c->kind) {
    case K_ENC:
        return sv ? attn_encoder_layer_backward_saved(ctx, c->m, sv, dout, dx)
                  : attn_encoder_layer_backward(ctx, c->m, &c->x, &k, &c->run, dout, dx);
    case K_ENCS:
        return sv ? attn_encoder_backward_saved(ctx, c->m, sv, dout, dx)
                  : attn_encoder_backward(ctx, c->m, &c->x, &k, &c->run, dout, dx);
    case K_DEC:
        return sv ? attn_decoder_layer_backward_saved(ctx, c->m, sv, dout, dx, dmem)
                  : attn_decoder_layer_backward(ctx, c->m, &c->x, &c->mem, &k, &c->run, dout, dx,
                                                dmem);
    case K_DECS:
        return sv ? attn_decoder_backward_saved(ctx, c->m, sv, dout, dx, dmem)
                  : attn_decoder_backward(ctx, c->m, &c->x, &c->mem, &k, &c->run, dout, dx,
                                          dmem);
    case K_GPT:
        return sv ? attn_gpt_backward_saved(ctx, c->m, sv, dout)
                  : attn_gpt_backward(ctx, c->m, &c->ids, &c->run, dout);
    case K_S2S:
        return sv ? attn_seq2seq_backward_saved(ctx, c->m, sv, dout)
                  : attn_seq2seq_backward(ctx, c->m, &c->ids, &c->ids2, &c->run, dout);
    case K_MHA:
        return sv ? attn_mha_backward_saved(ctx, c->m, sv, dout, dx, dmem, dval)
                  : attn_mha_backward(ctx, c->m, &c->x, &c->mem, &c->val, mo(&c->m2), mo(&c->m1),
                                      &c->mo, &c->run, dout, dx, dmem, dval);
    case K_VIT:
        return sv ? attn_vit_backward_saved(ctx, c->m, sv, dout, dx)
                  : attn_vit_backward(ctx, c->m, &c->x, &c->run, dout, dx);
    case K_TF:
        return sv ? attn_transformer_backward_saved(ctx, c->m, sv, dout, dx, dmem)
                  : attn_transformer_backward(ctx, c->m, &c->x, &c->mem, &k, &c->run, dout, dx,
                                              dmem);
    }
    return ATTN_E_INVALID;
}

static void grads(const attn_module *m, float *dst) {
    size_t k = 0;
    for (size_t i = 0; i < attn_module_param_count(m); i++) {
        attn_tensor g;
        attn_module_grad_at(m, i, NULL, &g);
        size_t n = (size_t)attn_tensor_numel(&g);
        memcpy(dst + k, g.data, n * sizeof(float));
        k += n;
    }
}

/* Every byte of the caller's inputs (floats, ids, masks) set to garbage, or back. */
typedef struct {
    void *p[12];
    void *keep[12];
    size_t n[12];
    int count;
} scribble;

static void scr_add(scribble *s, void *p, size_t bytes) {
    if (!p || !bytes) return;
    s->p[s->count] = p;
    s->n[s->count] = bytes;
    s->keep[s->count] = malloc(bytes);
    memcpy(s->keep[s->count], p, bytes);
    s->count++;
}
static size_t tbytes(const attn_tensor *t) {
    return t->data ? (size_t)attn_tensor_numel(t) * attn_dtype_size(t->dtype) : 0;
}
static void scr_on(tcase *c, scribble *s) {
    memset(s, 0, sizeof *s);
    scr_add(s, c->x.data, tbytes(&c->x));
    scr_add(s, c->mem.data, tbytes(&c->mem));
    scr_add(s, c->val.data, tbytes(&c->val));
    scr_add(s, c->ids.data, tbytes(&c->ids));
    scr_add(s, c->ids2.data, tbytes(&c->ids2));
    const attn_mask *ms[4] = {&c->m1, &c->m2, &c->m3, &c->m4};
    for (int i = 0; i < 4; i++)
        if (ms[i]->kind) scr_add(s, ms[i]->t.data, tbytes(&ms[i]->t));
    for (int i = 0; i < s->count; i++) memset(s->p[i], 0x41, s->n[i]); /* floats 12.07, ids huge */
}
static void scr_off(scribble *s) {
    for (int i = 0; i < s->count; i++) {
        memcpy(s->p[i], s->keep[i], s->n[i]);
        free(s->keep[i]);
    }
}

/* One forward + backward: recomputing (flags < 0) or saved with flags. */
static int run(attn_ctx *ctx, tcase *c, int flags, result *r) {
    memset(r, 0, sizeof *r);
    r->nout = (size_t)attn_tensor_numel(&c->out);
    r->ngrad = (size_t)attn_module_numel(c->m);
    r->nx = c->x.data ? (size_t)attn_tensor_numel(&c->x) : 0;
    r->nmem = c->mem.data ? (size_t)attn_tensor_numel(&c->mem) : 0;
    r->nval = c->val.data ? (size_t)attn_tensor_numel(&c->val) : 0;
    r->out = calloc(r->nout, sizeof(float));
    r->grad = calloc(r->ngrad, sizeof(float));
    r->dx = calloc(r->nx + 1, sizeof(float));
    r->dmem = calloc(r->nmem + 1, sizeof(float));
    r->dval = calloc(r->nval + 1, sizeof(float));
    attn_tensor out = c->out, dout = c->out, dx = c->x, dmem = c->mem, dval = c->val;
    out.data = r->out, dout.data = c->cot, dx.data = r->nx ? r->dx : NULL;
    dmem.data = r->nmem ? r->dmem : NULL;
    dval.data = r->nval ? r->dval : NULL;
    attn_saved *sv = NULL;
    if (flags >= 0 && !TU_STATUS(attn_saved_create(ctx, (unsigned)flags, &sv), ATTN_OK, ctx))
        return 0;
    int ok = TU_STATUS(fwd(ctx, c, &out, sv), ATTN_OK, ctx);
    if (ok && sv) {
        r->bytes = attn_saved_bytes(sv);
        TU_CHECK(r->bytes > 0, "%s: attn_saved_bytes is 0 after a forward", c->name);
    }
    attn_module_zero_grad(c->m);
    scribble s;
    if (sv) scr_on(c, &s); /* the record must not read the caller's memory */
    ok = ok && TU_STATUS(bwd(ctx, c, &dout, sv, &dx, &dmem, &dval), ATTN_OK, ctx);
    if (sv) scr_off(&s);
    grads(c->m, r->grad);
    if (ok && sv) { /* the record is intact: a second backward gives the same bits */
        float *g2 = malloc(r->ngrad * sizeof(float)), *dx2 = calloc(r->nx + 1, sizeof(float));
        attn_tensor dx2t = dx;
        if (dx2t.data) dx2t.data = dx2;
        attn_module_zero_grad(c->m);
        ok = TU_STATUS(bwd(ctx, c, &dout, sv, &dx2t, NULL, NULL), ATTN_OK, ctx);
        grads(c->m, g2);
        TU_CHECK(memcmp(g2, r->grad, r->ngrad * sizeof(float)) == 0 &&
                     memcmp(dx2, r->dx, r->nx * sizeof(float)) == 0,
                 "%s: a second saved backward differs", c->name);
        free(g2);
        free(dx2);
    }
    attn_saved_free(sv);
    return ok;
}

static void result_free(result *r) {
    free(r->out), free(r->grad), free(r->dx), free(r->dmem), free(r->dval);
}

/* |got - ref| <= 1e-5 max|ref| (NaN fails); prints the error. */
static void close_to(const char *name, const char *what, const float *got, const float *ref,
                     size_t n) {
    if (!n) return;
    double mx = 0, err = 0;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(ref[i])) nan = 1;
        double e = fabs((double)got[i] - ref[i]);
        if (e > err) err = e;
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    }
    int same = memcmp(got, ref, n * sizeof(float)) == 0;
    double rel = mx > 0 ? err / mx : err;
    if (rel > worst_rel) worst_rel = rel;
    n_compared++;
    n_identical += same;
    printf("  %-40s %-6s max|ref| %-9.3g max err %-9.3g (%s)\n", name, what, mx, err,
           same ? "same bits" : "differs");
    TU_CHECK(!nan && err <= 1e-5 * mx, "%s %s: saved vs recomputed max error %.3g > 1e-5 x %.3g",
             name, what, err, mx);
}

static void same_bits(const char *name, const char *what, const result *a, const result *b) {
    TU_CHECK(memcmp(a->out, b->out, a->nout * sizeof(float)) == 0, "%s: %s: outputs differ",
             name, what);
    TU_CHECK(memcmp(a->grad, b->grad, a->ngrad * sizeof(float)) == 0,
             "%s: %s: parameter gradients differ", name, what);
    TU_CHECK(memcmp(a->dx, b->dx, a->nx * sizeof(float)) == 0, "%s: %s: input gradients differ",
             name, what);
    TU_CHECK(memcmp(a->dmem, b->dmem, a->nmem * sizeof(float)) == 0,
             "%s: %s: memory gradients differ", name, what);
    TU_CHECK(memcmp(a->dval, b->dval, a->nval * sizeof(float)) == 0,
             "%s: %s: value gradients differ", name, what);
}

static void check_case(attn_ctx *c1, attn_ctx *c3, tcase *c, uint64_t seed) {
    size_t np = attn_module_param_count(c->m);
    for (size_t i = 0; i < np; i++) {
        attn_tensor t;
        attn_module_param_at(c->m, i, NULL, &t);
        tu_fill(t.data, (size_t)attn_tensor_numel(&t), seed * 100 + i, -0.3f, 0.3f);
    }
    size_t nout = (size_t)attn_tensor_numel(&c->out);
    c->cot = malloc(nout * sizeof(float));
    tu_fill(c->cot, nout, seed + 7, -1, 1);
    if (!TU_STATUS(attn_module_enable_grad(c1, c->m), ATTN_OK, c1)) return;
    result ref, sv, ck, sv3;
    int ok = run(c1, c, -1, &ref);
    ok = run(c1, c, 0, &sv) && ok;
    ok = run(c1, c, ATTN_SAVED_CHECKPOINT, &ck) && ok;
    ok = run(c3, c, 0, &sv3) && ok;
    if (ok) {
        TU_CHECK(memcmp(sv.out, ref.out, sv.nout * sizeof(float)) == 0,
                 "%s: the training forward's output differs from the forward's", c->name);
        close_to(c->name, "params", sv.grad, ref.grad, sv.ngrad);
        close_to(c->name, "dx", sv.dx, ref.dx, sv.nx);
        close_to(c->name, "dmem", sv.dmem, ref.dmem, sv.nmem);
        close_to(c->name, "dval", sv.dval, ref.dval, sv.nval);
        same_bits(c->name, "checkpointing vs full saving", &ck, &sv);
        same_bits(c->name, "3 threads vs 1", &sv3, &sv);
        TU_CHECK(ck.bytes < sv.bytes, "%s: checkpointing records %zu bytes, full saving %zu",
                 c->name, ck.bytes, sv.bytes);
        printf("  %-40s recorded %zu bytes (checkpointing %zu)\n", c->name, sv.bytes, ck.bytes);
    }
    result_free(&ref), result_free(&sv), result_free(&ck), result_free(&sv3);
    free(c->cot);
}

/* ---- a counting allocator for the tape's hooks ------------------------------------------- */
static long live_allocs;
static long fail_after = -1; /* allocations left before failing (-1: never) */
static void *count_alloc(void *user, size_t n) {
    (void)user;
    if (fail_after == 0) return NULL;
    if (fail_after > 0) fail_after--;
    void *p = malloc(n);
    if (p) live_allocs++;
    return p;
}
static void count_free(void *user, void *p) {
    (void)user;
    if (p) live_allocs--;
    free(p);
}

static float fb[10][200000];
static attn_tensor seq(int slot, int64_t B, int64_t L, int64_t E, uint64_t seed) {
    tu_fill(fb[slot], (size_t)(B * L * E), seed, -1, 1);
    return attn_view3(fb[slot], B, L, E);
}

int main(void) {
    attn_ctx *c1 = tu_ctx(1), *c3 = tu_ctx(3);
    if (!c1 || !c3) return 1;
    static float outb[200000];
    static unsigned char kpm_enc[2 * 80], kpm_dec[2 * 300], kpm_mem[2 * 300];
    static float addm[80 * 80], wbuf[2 * 9 * 8];
    static unsigned char causal_blk[16 * 16];
    static int64_t ids[2 * 64], sids[3 * 9], tids[3 * 7];
    uint64_t seed = 1;
    tcase c;

    /* ATTN_TEST_QUICK (an emulator): post-norm without dropout and pre-norm with it, each
     * choice once (not their four pairs) */
    const int quick = tu_quick("test_saved");
    for (int variant = 0; variant < 4; variant++) {
        if (quick && (variant == 1 || variant == 2)) continue;
        int pre = variant & 1, drop = (variant >> 1) & 1;
        attn_transformer_config tc = attn_transformer_defaults(32, 4);
        tc.dim_feedforward = 48;
        tc.norm_first = pre;
        tc.dropout = drop ? 0.15f : 0.0f;
        tc.activation = pre ? ATTN_ACT_GELU : ATTN_ACT_RELU;
        tc.num_encoder_layers = tc.num_decoder_layers = 2;
        attn_run run = {drop, 77, 3, 0};
        const char *vn = pre ? (drop ? "pre-norm, dropout" : "pre-norm")
                             : (drop ? "post-norm, dropout" : "post-norm");

        /* encoder layer and stack: short (row kernels) and long (fused kernels) sequences,
         * padding, an additive mask or causal */
        for (int k = 0; k < 4; k++) {
            int stack = k & 1, lng = k >> 1;
            int64_t B = 2, L = lng ? 80 : 9, E = 32;
            memset(&c, 0, sizeof c);
            if (stack) attn_encoder_create(c1, &tc, 1, &c.m);
            else attn_encoder_layer_create(c1, &tc, &c.m);
            c.kind = stack ? K_ENCS : K_ENC, c.run = run;
            c.x = seq(0, B, L, E, seed++);
            c.out = attn_view3(outb, B, L, E);
            memset(kpm_enc, 0, sizeof kpm_enc);
            kpm_enc[L - 1] = kpm_enc[L + 2] = 1;
            int64_t ks[2] = {B, L}, as[2] = {L, L};
            c.m2.kind = ATTN_MASK_BLOCK, c.m2.t = attn_tensor_make(kpm_enc, ATTN_BOOL, 2, ks);
            if (lng) {
                for (int64_t i = 0; i < L * L; i++) addm[i] = 0.3f * (float)((i * 7) % 5) - 0.6f;
                c.m1.kind = ATTN_MASK_ADD, c.m1.t = attn_tensor_make(addm, ATTN_F32, 2, as);
            } else {
                c.causal = 1;
            }
            snprintf(c.name, sizeof c.name, "%s L=%lld, %s", stack ? "encoder" : "encoder layer",
                     (long long)L, vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* decoder layer and stack: causal target with padding over a padded memory; and a
         * short target over a long memory without dropout (the forward's cross-attention on
         * the decode kernels, the backward on the fused ones) */
        for (int k = 0; k < 4; k++) {
            int stack = k & 1, lng = k >> 1;
            if (lng && drop) continue;
            int64_t B = 2, T = lng ? 16 : 7, S = lng ? 300 : 11, E = 32;
            memset(&c, 0, sizeof c);
            if (stack) attn_decoder_create(c1, &tc, 1, &c.m);
            else attn_decoder_layer_create(c1, &tc, &c.m);
            c.kind = stack ? K_DECS : K_DEC, c.run = run;
            c.x = seq(0, B, T, E, seed++);
            c.mem = seq(1, B, S, E, seed++);
            c.out = attn_view3(outb, B, T, E);
            int64_t ts[2] = {B, T}, ss[2] = {B, S}, cs[2] = {T, T};
            memset(kpm_dec, 0, sizeof kpm_dec), memset(kpm_mem, 0, sizeof kpm_mem);
            kpm_dec[T + T - 1] = 1;
            kpm_mem[S - 1] = kpm_mem[S - 2] = kpm_mem[S + 4] = 1;
            for (int64_t i = 0; i < T * T; i++) causal_blk[i] = (i % T) > (i / T);
            c.m1.kind = ATTN_MASK_BLOCK, c.m1.t = attn_tensor_make(causal_blk, ATTN_BOOL, 2, cs);
            c.m3.kind = ATTN_MASK_BLOCK, c.m3.t = attn_tensor_make(kpm_dec, ATTN_BOOL, 2, ts);
            c.m4.kind = ATTN_MASK_BLOCK, c.m4.t = attn_tensor_make(kpm_mem, ATTN_BOOL, 2, ss);
            snprintf(c.name, sizeof c.name, "%s T=%lld S=%lld, %s",
                     stack ? "decoder" : "decoder layer", (long long)T, (long long)S, vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* multi-head attention: self-attention (one view for query, key and value) with
         * padding and causal, short and long; cross-attention with kdim/vdim, bias_kv,
         * zero_attn, a 3-D additive mask and averaged weights */
        for (int k = 0; k < 3; k++) {
            int64_t B = 2, L = k == 1 ? 80 : 9, S = k == 2 ? 6 : L, E = 32, H = 4;
            memset(&c, 0, sizeof c);
            attn_mha_config mc = attn_mha_defaults(E, H);
            mc.dropout = tc.dropout;
            if (k == 2) mc.kdim = 5, mc.vdim = 7, mc.add_bias_kv = 1, mc.add_zero_attn = 1;
            attn_mha_create(c1, &mc, &c.m);
            c.kind = K_MHA, c.run = run;
            c.x = seq(0, B, L, E, seed++);
            c.out = attn_view3(outb, B, L, E);
            int64_t ks[2] = {B, S};
            memset(kpm_enc, 0, sizeof kpm_enc);
            kpm_enc[S - 1] = kpm_enc[S + 1] = 1;
            c.m2.kind = ATTN_MASK_BLOCK, c.m2.t = attn_tensor_make(kpm_enc, ATTN_BOOL, 2, ks);
            if (k < 2) {
                c.mem = c.val = c.x;
                c.mo.is_causal = 1;
            } else {
                c.mem = seq(1, B, S, 5, seed++);
                c.val = seq(2, B, S, 7, seed++);
                int64_t as[3] = {B * H, L, S};
                for (int64_t i = 0; i < B * H * L * S; i++) addm[i] = 0.25f * (float)(i % 3);
                c.m1.kind = ATTN_MASK_ADD, c.m1.t = attn_tensor_make(addm, ATTN_F32, 3, as);
                c.mo.need_weights = 1, c.mo.average_attn_weights = 1;
                c.w = attn_view3(wbuf, B, L, S + 2);
            }
            snprintf(c.name, sizeof c.name, "mha %s L=%lld, %s", k == 2 ? "cross" : "self",
                     (long long)L, drop ? "dropout" : "no dropout");
            /* norm order does not apply (quick: once without dropout, once with it) */
            if (!pre || quick) check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* nn.Transformer: padded source, causal padded target */
        {
            int64_t B = 2, S = 10, T = 7, E = 32;
            memset(&c, 0, sizeof c);
            attn_transformer_create(c1, &tc, &c.m);
            c.kind = K_TF, c.run = run, c.causal = 0;
            c.x = seq(0, B, S, E, seed++);
            c.mem = seq(1, B, T, E, seed++);
            c.out = attn_view3(outb, B, T, E);
            int64_t ts[2] = {B, T}, ss[2] = {B, S}, cs[2] = {T, T};
            memset(kpm_dec, 0, sizeof kpm_dec), memset(kpm_mem, 0, sizeof kpm_mem);
            kpm_dec[2 * T - 1] = 1;
            kpm_mem[S - 1] = kpm_mem[S + 3] = 1;
            for (int64_t i = 0; i < T * T; i++) causal_blk[i] = (i % T) > (i / T);
            c.m1.kind = ATTN_MASK_BLOCK, c.m1.t = attn_tensor_make(causal_blk, ATTN_BOOL, 2, cs);
            c.m3.kind = ATTN_MASK_BLOCK, c.m3.t = attn_tensor_make(kpm_dec, ATTN_BOOL, 2, ts);
            c.m4.kind = ATTN_MASK_BLOCK, c.m4.t = attn_tensor_make(kpm_mem, ATTN_BOOL, 2, ss);
            snprintf(c.name, sizeof c.name, "transformer S=%lld T=%lld, %s", (long long)S,
                     (long long)T, vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* GPT: 64 tokens (fused kernels) and 5 (row kernels) */
        for (int k = 0; k < 2; k++) {
            int64_t B = 2, T = k ? 5 : 64, V = 11;
            memset(&c, 0, sizeof c);
            attn_gpt_create(c1, &tc, V, 64, &c.m);
            c.kind = K_GPT, c.run = run;
            for (int64_t i = 0; i < B * T; i++) ids[i] = (i * 5 + variant + (i / 3)) % V;
            int64_t is[2] = {B, T};
            c.ids = attn_tensor_make(ids, ATTN_I64, 2, is);
            c.out = attn_view3(outb, B, T, V);
            snprintf(c.name, sizeof c.name, "gpt T=%lld, %s", (long long)T, vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* ViT: 2 images of 2 channels, 8x8 in patches of 4 (5 tokens with [CLS]) */
        {
            enum { B = 2, C = 2, H = 8 };
            memset(&c, 0, sizeof c);
            attn_vit_config vc = {tc, H, C, 4, 7};
            vc.tf.num_encoder_layers = 2;
            attn_vit_create(c1, &vc, &c.m);
            c.kind = K_VIT, c.run = run;
            tu_fill(fb[0], B * C * H * H, seed++, -1, 1);
            int64_t is[4] = {B, C, H, H}, ls[2] = {B, 7};
            c.x = attn_tensor_make(fb[0], ATTN_F32, 4, is);
            c.out = attn_tensor_make(outb, ATTN_F32, 2, ls);
            snprintf(c.name, sizeof c.name, "vit, %s", vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
        /* seq2seq with padded source and target (pad id 0) */
        {
            memset(&c, 0, sizeof c);
            attn_seq2seq_config qc = {tc, 13, 10, 16, 0};
            attn_seq2seq_create(c1, &qc, &c.m);
            c.kind = K_S2S, c.run = run;
            for (int i = 0; i < 27; i++) sids[i] = 1 + (i * 7 + variant) % 12;
            sids[8] = sids[7] = sids[17] = 0;
            for (int i = 0; i < 21; i++) tids[i] = 1 + (i * 3 + variant) % 9;
            tids[6] = tids[20] = tids[19] = 0;
            int64_t ss[2] = {3, 9}, ts[2] = {3, 7};
            c.ids = attn_tensor_make(sids, ATTN_I64, 2, ss);
            c.ids2 = attn_tensor_make(tids, ATTN_I64, 2, ts);
            c.out = attn_view3(outb, 3, 7, 10);
            snprintf(c.name, sizeof c.name, "seq2seq, %s", vn);
            check_case(c1, c3, &c, seed++);
            attn_module_free(c.m);
        }
    }
    printf("saved vs recomputed: %d of %d gradient sets bit-identical, worst relative error "
           "%.3g\n", n_identical, n_compared, worst_rel);

    /* ---- the tape: hooks, growth, reuse, failures ------------------------------------------ */
    {
        attn_ctx_params p;
        memset(&p, 0, sizeof p);
        p.alloc = count_alloc, p.free = count_free;
        attn_ctx *ch;
        if (attn_ctx_create(&p, &ch) != ATTN_OK) return 1;
        long base = live_allocs; /* the context's own */
        attn_transformer_config tc = attn_transformer_defaults(32, 4);
        tc.dim_feedforward = 64, tc.num_encoder_layers = 3, tc.dropout = 0.1f;
        attn_module *m;
        attn_gpt_create(c1, &tc, 11, 64, &m);
        attn_module_init(c1, m, 5);
        attn_module_enable_grad(c1, m);
        attn_saved *sv, *fresh;
        TU_STATUS(attn_saved_create(ch, 0, &sv), ATTN_OK, ch);
        TU_STATUS(attn_saved_create(c1, 0, &fresh), ATTN_OK, c1);
        long after_create = live_allocs;
        TU_CHECK(after_create == base + 1, "attn_saved_create: one allocation (got %ld)",
                 after_create - base);
        TU_CHECK(attn_saved_bytes(sv) == 0, "an empty attn_saved records nothing");
        /* growing batches spill over several blocks; each step must equal a fresh record */
        int64_t Bs[4] = {2, 16, 40, 16};
        static float lg[40 * 64 * 11], g1[1 << 18], g2[1 << 18];
        size_t ng = (size_t)attn_module_numel(m);
        for (int step = 0; step < 4; step++) {
            int64_t B = Bs[step], T = 64;
            static int64_t bid[40 * 64];
            for (int64_t i = 0; i < B * T; i++) bid[i] = (i * 3 + step) % 11;
            int64_t is[2] = {B, T}, ls[3] = {B, T, 11};
            attn_tensor I = attn_tensor_make(bid, ATTN_I64, 2, is);
            attn_tensor Lg = attn_tensor_make(lg, ATTN_F32, 3, ls);
            attn_run run = {1, 9, (uint64_t)step, 0};
            for (int which = 0; which < 2; which++) {
                attn_saved *s = which ? fresh : sv;
                if (which) { /* a fresh record each time */
                    attn_saved_free(fresh);
                    attn_saved_create(c1, 0, &fresh);
                    s = fresh;
                }
                TU_STATUS(attn_gpt_forward_train(c1, m, &I, &run, &Lg, s), ATTN_OK, c1);
                tu_fill(lg, (size_t)(B * T * 11), 3, -0.1f, 0.1f);
                attn_module_zero_grad(m);
                TU_STATUS(attn_gpt_backward_saved(c1, m, s, &Lg), ATTN_OK, c1);
                grads(m, which ? g2 : g1);
            }
            TU_CHECK(memcmp(g1, g2, ng * sizeof(float)) == 0,
                     "step %d (B=%lld): a reused record differs from a fresh one", step,
                     (long long)B);
            printf("  tape step %d: B=%lld, %zu bytes recorded, %ld live allocations\n", step,
                   (long long)B, attn_saved_bytes(sv), live_allocs - base);
        }
        /* after a spill, the next step runs in one block: the saved object, the block table
         * and one block */
        TU_CHECK(live_allocs - base == 3, "after reuse the tape holds %ld blocks, not one",
                 live_allocs - base - 2);
        attn_saved_free(sv);
        TU_CHECK(live_allocs == base, "attn_saved_free leaves %ld allocations", live_allocs - base);

        /* out of memory in the middle of a forward: an error, nothing recorded, nothing lost */
        for (int k = 0; k < 3; k++) {
            long budget = k == 1 ? 2 : 1; /* the block table, then the first block */
            TU_STATUS(attn_saved_create(ch, k == 2 ? ATTN_SAVED_CHECKPOINT : 0, &sv), ATTN_OK,
                      ch);
            int64_t is[2] = {40, 64}, ls[3] = {40, 64, 11};
            static int64_t bid[40 * 64];
            attn_tensor I = attn_tensor_make(bid, ATTN_I64, 2, is);
            attn_tensor Lg = attn_tensor_make(lg, ATTN_F32, 3, ls);
            fail_after = budget;
            attn_status st = attn_gpt_forward_train(c1, m, &I, NULL, &Lg, sv);
            fail_after = -1;
            TU_CHECK(st == ATTN_E_NOMEM, "budget %ld: forward_train gave %s, not ATTN_E_NOMEM",
                     budget, attn_status_name(st));
            TU_CHECK(attn_saved_bytes(sv) == 0, "budget %ld: a failed forward left a record",
                     budget);
            TU_STATUS(attn_gpt_backward_saved(c1, m, sv, &Lg), ATTN_E_INVALID, c1);
            attn_saved_free(sv);
            TU_CHECK(live_allocs == base, "budget %ld: %ld allocations left", budget,
                     live_allocs - base);
        }
        attn_saved_free(fresh);
        attn_module_free(m);
        attn_ctx_free(ch);
        TU_CHECK(live_allocs == 0, "the context's allocations: %ld left", live_allocs);
    }

    /* ---- sizes are overflow-checked ---------------------------------------------------- */
    {
        attn__tape t;
        memset(&t, 0, sizeof t);
        t.alloc = count_alloc, t.free = count_free;
        void *p = (void *)1;
        TU_STATUS(attn__tape_alloc(c1, &t, SIZE_MAX / 2, 4, &p), ATTN_E_OVERFLOW, c1);
        TU_CHECK(p == NULL, "a refused allocation sets NULL");
        TU_STATUS(attn__tape_alloc(c1, &t, SIZE_MAX - 10, 1, &p), ATTN_E_OVERFLOW, c1);
        float *f;
        TU_STATUS(attn__rec_f32(c1, &t, &f, INT64_MAX / 2, 3, 1, 1), ATTN_E_OVERFLOW, c1);
        TU_STATUS(attn__rec_f32(c1, &t, &f, (int64_t)1 << 31, (int64_t)1 << 31, 1, 1),
                  ATTN_E_OVERFLOW, c1);
        attn__tape_free(&t);
        TU_CHECK(live_allocs == 0, "the overflow checks allocate nothing");
    }

    /* ---- misuse ---------------------------------------------------------------------------- */
    {
        attn_transformer_config tc = attn_transformer_defaults(16, 2);
        tc.dim_feedforward = 16;
        attn_module *a, *b, *d;
        attn_encoder_layer_create(c1, &tc, &a);
        attn_encoder_layer_create(c1, &tc, &b);
        tc.num_decoder_layers = 1;
        attn_decoder_create(c1, &tc, 0, &d);
        attn_module_enable_grad(c1, a), attn_module_enable_grad(c1, b);
        attn_module_enable_grad(c1, d);
        attn_saved *sv;
        TU_STATUS(attn_saved_create(c1, 4, &sv), ATTN_E_INVALID, c1);
        TU_STATUS(attn_saved_create(c1, 0, NULL), ATTN_E_INVALID, c1);
        TU_STATUS(attn_saved_create(c1, 0, &sv), ATTN_OK, c1);
        attn_tensor X = seq(0, 2, 5, 16, 1), Y = attn_view3(outb, 2, 5, 16);
        attn_tensor D = seq(1, 2, 5, 16, 2), Dbad = seq(1, 2, 4, 16, 2);
        TU_STATUS(attn_encoder_layer_backward_saved(c1, a, sv, &D, NULL), ATTN_E_INVALID, c1);
        TU_STATUS(attn_encoder_layer_forward_train(c1, a, &X, NULL, NULL, &Y, NULL),
                  ATTN_E_INVALID, c1);
        TU_STATUS(attn_encoder_layer_forward_train(c1, a, &X, NULL, NULL, &Y, sv),
                  ATTN_OK, c1);
        TU_STATUS(attn_encoder_layer_backward_saved(c1, b, sv, &D, NULL), ATTN_E_INVALID, c1);
        TU_CHECK(strstr(attn_ctx_errmsg(c1), "another module") != NULL, "message: %s",
                 attn_ctx_errmsg(c1));
        TU_STATUS(attn_encoder_layer_backward_saved(c1, a, sv, &Dbad, NULL), ATTN_E_SHAPE, c1);
        TU_STATUS(attn_encoder_layer_backward_saved(c1, a, NULL, &D, NULL), ATTN_E_INVALID, c1);
        TU_STATUS(attn_decoder_backward_saved(c1, d, sv, &D, NULL, NULL), ATTN_E_INVALID, c1);
        TU_STATUS(attn_encoder_layer_backward_saved(c1, a, sv, &D, NULL), ATTN_OK, c1);
        /* a failing forward (a wrong output shape) forgets the last record */
        attn_tensor Ybad = attn_view3(outb, 2, 4, 16);
        TU_STATUS(attn_encoder_layer_forward_train(c1, a, &X, NULL, NULL, &Ybad, sv),
                  ATTN_E_SHAPE, c1);
        TU_STATUS(attn_encoder_layer_backward_saved(c1, a, sv, &D, NULL), ATTN_E_INVALID, c1);
        attn_saved_free(sv);
        attn_saved_free(NULL);
        attn_module_free(a), attn_module_free(b), attn_module_free(d);
    }
    attn_ctx_free(c1);
    attn_ctx_free(c3);
    return tu_finish("test_saved");
}
