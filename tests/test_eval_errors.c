/* attn_eval on bad input files built in memory: every refusal must come with the right status
 * and a message that names the offending attribute, tensor or op.  A few valid files check that
 * the strictness does not refuse what it should accept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static attn_ctx *ctx;

/* ---- a tiny case builder ------------------------------------------------------------------ */

typedef struct tcase {
    attn_st_writer *w;
} tcase;

static tcase begin(const char *op) {
    tcase c;
    TU_STATUS(attn_st_writer_create(ctx, &c.w), ATTN_OK, ctx);
    if (op) attn_st_writer_meta(c.w, "op", op);
    return c;
}

static void meta(tcase *c, const char *k, const char *v) {
    TU_STATUS(attn_st_writer_meta(c->w, k, v), ATTN_OK, ctx);
}

/* F32 tensor of ndim dims filled with small deterministic values. */
static void f32(tcase *c, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                int64_t d3, int64_t d4) {
    int64_t shape[5] = {d0, d1, d2, d3, d4};
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    static float buf[4096];
    if (n > 4096) n = 4096;
    tu_fill(buf, n, (uint64_t)strlen(name) * 7919u + n, -0.5f, 0.5f);
    TU_STATUS(attn_st_writer_add(c->w, name, ATTN_F32, ndim, shape, buf), ATTN_OK, ctx);
}
#define F1(c, n, a) f32(c, n, 1, a, 1, 1, 1, 1)
#define F2(c, n, a, b) f32(c, n, 2, a, b, 1, 1, 1)
#define F3(c, n, a, b, d) f32(c, n, 3, a, b, d, 1, 1)
#define F4(c, n, a, b, d, e) f32(c, n, 4, a, b, d, e, 1)

static void raw(tcase *c, const char *name, attn_dtype dt, int ndim, const int64_t *shape,
                const void *data) {
    TU_STATUS(attn_st_writer_add(c->w, name, dt, ndim, shape, data), ATTN_OK, ctx);
}

/* Serialises the case, reads it back and runs attn_eval; the output file is returned in *res
 * when res is not NULL (caller frees), else dropped. */
static attn_status run(tcase *c, attn_st **res) {
    void *buf = NULL;
    size_t size = 0;
    attn_st *in = NULL;
    attn_st_writer *out = NULL;
    attn_status st = attn_st_writer_to_memory(c->w, &buf, &size);
    attn_st_writer_free(c->w);
    c->w = NULL;
    if (st != ATTN_OK) return st;
    st = attn_st_read_memory(ctx, buf, size, &in);
    attn_buffer_free(ctx, buf);
    if (st != ATTN_OK) return st;
    TU_STATUS(attn_st_writer_create(ctx, &out), ATTN_OK, ctx);
    attn_ctx_clear_error(ctx);
    st = attn_eval(ctx, in, out);
    if (st == ATTN_OK && res) {
        void *ob;
        size_t os;
        TU_STATUS(attn_st_writer_to_memory(out, &ob, &os), ATTN_OK, ctx);
        TU_STATUS(attn_st_read_memory(ctx, ob, os, res), ATTN_OK, ctx);
        attn_buffer_free(ctx, ob);
    }
    attn_st_writer_free(out);
    attn_st_free(in);
    return st;
}

/* Expects status `want` and, for a failure, a message containing each needle. */
static void expect(const char *what, tcase *c, attn_status want, const char *needle1,
                   const char *needle2) {
    attn_status st = run(c, NULL);
    const char *msg = attn_ctx_errmsg(ctx);
    TU_CHECK(st == want, "%s: got %s, expected %s (%s)", what, attn_status_name(st),
             attn_status_name(want), msg);
    if (want == ATTN_OK) return;
    if (getenv("ATTN_TEST_VERBOSE")) printf("%-40s %s\n", what, msg);
    TU_CHECK(msg[0] != 0, "%s: empty message", what);
    TU_CHECK(!needle1 || strstr(msg, needle1), "%s: message \"%s\" lacks \"%s\"", what, msg,
             needle1);
    TU_CHECK(!needle2 || strstr(msg, needle2), "%s: message \"%s\" lacks \"%s\"", what, msg,
             needle2);
}

/* ---- valid bases ------------------------------------------------------------------------ */

/* sdpa with B=1, H=2, L=S=3, D=4; no attributes. */
static tcase sdpa_base(void) {
    tcase c = begin("sdpa");
    F4(&c, "query", 1, 2, 3, 4);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    return c;
}

/* multihead_attention E=4, H=2, B=1, L=S=3, all parameters except those named in `skip`. */
static tcase mha_base(const char *skip) {
    tcase c = begin("multihead_attention");
    meta(&c, "embed_dim", "4");
    meta(&c, "num_heads", "2");
    const char *names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    int64_t d0[] = {12, 12, 4, 4}, d1[] = {4, 0, 4, 0};
    for (int i = 0; i < 4; i++) {
        if (skip && !strcmp(skip, names[i])) continue;
        if (d1[i])
            F2(&c, names[i], d0[i], d1[i]);
        else
            F1(&c, names[i], d0[i]);
    }
    F3(&c, "query", 1, 3, 4);
    F3(&c, "key", 1, 3, 4);
    F3(&c, "value", 1, 3, 4);
    return c;
}

static void test_valid(void) {
    tcase c = sdpa_base();
    expect("valid sdpa", &c, ATTN_OK, NULL, NULL);
    c = mha_base(NULL);
    expect("valid mha", &c, ATTN_OK, NULL, NULL);

    /* comment*, tol, and the other spellings of booleans are accepted */
    c = sdpa_base();
    meta(&c, "comment", "hello");
    meta(&c, "comment_2", "again");
    meta(&c, "tol", "1e-5");
    meta(&c, "is_causal", "True");
    meta(&c, "need_weights", "1");
    meta(&c, "return_lse", "False");
    expect("comments, tol, True/1/False", &c, ATTN_OK, NULL, NULL);

    /* outputs: names and shapes */
    attn_st *res = NULL;
    attn_st_tensor t;
    c = sdpa_base();
    meta(&c, "need_weights", "true");
    meta(&c, "return_lse", "true");
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    if (res) {
        TU_CHECK(attn_st_find(res, "out", &t) == ATTN_OK && t.ndim == 4 && t.shape[3] == 4,
                 "sdpa out");
        TU_CHECK(attn_st_find(res, "attn_weights", &t) == ATTN_OK && t.ndim == 4 &&
                     t.shape[3] == 3, "sdpa attn_weights");
        TU_CHECK(attn_st_find(res, "lse", &t) == ATTN_OK && t.ndim == 3, "sdpa lse");
        TU_CHECK(attn_st_meta(res, "op") && !strcmp(attn_st_meta(res, "op"), "sdpa"),
                 "output metadata op");
        attn_st_free(res);
        res = NULL;
    }

    /* 3-D sdpa (one head) gives 3-D outputs */
    c = begin("sdpa");
    F3(&c, "query", 2, 3, 4);
    F3(&c, "key", 2, 5, 4);
    F3(&c, "value", 2, 5, 6);
    meta(&c, "need_weights", "true");
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    if (res) {
        TU_CHECK(attn_st_find(res, "out", &t) == ATTN_OK && t.ndim == 3 && t.shape[2] == 6,
                 "3-D sdpa out");
        TU_CHECK(attn_st_find(res, "attn_weights", &t) == ATTN_OK && t.ndim == 3 &&
                     t.shape[2] == 5, "3-D sdpa weights");
        attn_st_free(res);
        res = NULL;
    }

    /* unbatched multihead_attention ([L, E]) equals the batch of one, with 2-D outputs */
    attn_st *r1 = NULL, *r2 = NULL;
    c = mha_base(NULL);
    TU_STATUS(run(&c, &r1), ATTN_OK, ctx);
    c = begin("multihead_attention");
    meta(&c, "embed_dim", "4");
    meta(&c, "num_heads", "2");
    F2(&c, "in_proj_weight", 12, 4);
    F1(&c, "in_proj_bias", 12);
    F2(&c, "out_proj.weight", 4, 4);
    F1(&c, "out_proj.bias", 4);
    F2(&c, "query", 3, 4);
    F2(&c, "key", 3, 4);
    F2(&c, "value", 3, 4);
    TU_STATUS(run(&c, &r2), ATTN_OK, ctx);
    if (r1 && r2) {
        attn_st_tensor a, b;
        const char *names[2] = {"out", "attn_weights"};
        for (int i = 0; i < 2; i++) {
            int ok = attn_st_find(r1, names[i], &a) == ATTN_OK &&
                     attn_st_find(r2, names[i], &b) == ATTN_OK && a.ndim == 3 && b.ndim == 2 &&
                     a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes);
            TU_CHECK(ok, "unbatched mha %s differs from the batch of one", names[i]);
        }
    }
    attn_st_free(r1);
    attn_st_free(r2);

    /* sdpa scale = 0 (PyTorch: every score 0) gives uniform weights */
    c = sdpa_base();
    meta(&c, "scale", "0.0");
    meta(&c, "need_weights", "true");
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    if (res && attn_st_find(res, "attn_weights", &t) == ATTN_OK) {
        float w[18];
        TU_STATUS(attn_st_to_f32(ctx, &t, w, 18), ATTN_OK, ctx);
        for (int i = 0; i < 18; i++)
            TU_CHECK(fabsf(w[i] - 1.0f / 3.0f) < 1e-6f, "scale 0: weight %d = %g", i, w[i]);
    }
    attn_st_free(res);
    res = NULL;

    /* causal_attention with its registered buffer triu(ones, 1) */
    c = begin("causal_attention");
    meta(&c, "d_in", "3");
    meta(&c, "d_out", "2");
    meta(&c, "context_length", "4");
    F3(&c, "x", 2, 3, 3);
    F2(&c, "W_query.weight", 2, 3);
    F2(&c, "W_key.weight", 2, 3);
    F2(&c, "W_value.weight", 2, 3);
    float tri[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) tri[i * 4 + j] = j > i ? 1.0f : 0.0f;
    int64_t s44[2] = {4, 4};
    raw(&c, "mask", ATTN_F32, 2, s44, tri);
    expect("causal_attention with its mask buffer", &c, ATTN_OK, NULL, NULL);

    /* positional_encoding table only */
    c = begin("positional_encoding");
    meta(&c, "d_model", "6");
    meta(&c, "length", "5");
    expect("positional table", &c, ATTN_OK, NULL, NULL);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void test_names(void) {
    tcase c = sdpa_base();
    attn_st_writer_meta(c.w, "op", "flash_attention_9000");
    expect("unknown op", &c, ATTN_E_INVALID, "flash_attention_9000", NULL);

    c = begin(NULL);
    F1(&c, "x", 3);
    expect("no op", &c, ATTN_E_INVALID, "\"op\"", NULL);

    c = sdpa_base();
    meta(&c, "frobnicate", "1");
    expect("unknown attribute", &c, ATTN_E_INVALID, "frobnicate", NULL);

    c = sdpa_base();
    meta(&c, "num_heads", "2"); /* an attribute of another op */
    expect("attribute of another op", &c, ATTN_E_INVALID, "num_heads", NULL);

    c = sdpa_base();
    F2(&c, "extra_tensor", 2, 2);
    expect("unknown tensor (no module)", &c, ATTN_E_INVALID, "extra_tensor", NULL);

    c = mha_base(NULL);
    F2(&c, "in_proj_weights", 12, 4);
    expect("unknown tensor (module)", &c, ATTN_E_INVALID, "in_proj_weights", NULL);

    /* bias = false: in_proj_bias is not a parameter any more */
    c = mha_base(NULL);
    meta(&c, "bias", "false");
    expect("parameter excluded by an attribute", &c, ATTN_E_INVALID, "in_proj_bias", NULL);

    c = mha_base(NULL);
    F1(&c, "mask", 3);
    expect("seed buffer name on mha", &c, ATTN_E_INVALID, "mask", NULL);

    c = begin("multihead_attention");
    meta(&c, "embed_dim", "4");
    F3(&c, "query", 1, 3, 4);
    expect("missing required attribute", &c, ATTN_E_INVALID, "num_heads", NULL);

    c = mha_base("out_proj.bias");
    expect("missing parameter", &c, ATTN_E_NOT_FOUND, "out_proj.bias", NULL);

    c = begin("sdpa");
    F4(&c, "query", 1, 2, 3, 4);
    F4(&c, "key", 1, 2, 3, 4);
    expect("missing input", &c, ATTN_E_INVALID, "value", NULL);

    c = begin("positional_encoding");
    meta(&c, "d_model", "6");
    expect("positional encoding without x or length", &c, ATTN_E_INVALID, "length", NULL);
}

static void test_values(void) {
    tcase c = sdpa_base();
    meta(&c, "is_causal", "yes");
    expect("bad boolean", &c, ATTN_E_INVALID, "is_causal", "yes");

    c = sdpa_base();
    meta(&c, "need_weights", "");
    expect("empty boolean", &c, ATTN_E_INVALID, "need_weights", NULL);

    c = mha_base(NULL);
    attn_st_writer_meta(c.w, "embed_dim", "4x");
    expect("bad int", &c, ATTN_E_INVALID, "embed_dim", "4x");

    c = mha_base(NULL);
    attn_st_writer_meta(c.w, "num_heads", "99999999999999999999999");
    expect("int overflow", &c, ATTN_E_INVALID, "num_heads", "99999999999999999999999");

    c = mha_base(NULL);
    attn_st_writer_meta(c.w, "num_heads", "2.0");
    expect("float for int", &c, ATTN_E_INVALID, "num_heads", "2.0");

    c = mha_base(NULL);
    attn_st_writer_meta(c.w, "num_heads", " 2");
    expect("int with a space", &c, ATTN_E_INVALID, "num_heads", NULL);

    c = mha_base(NULL);
    meta(&c, "dropout", "0.1abc");
    expect("bad float", &c, ATTN_E_INVALID, "dropout", "0.1abc");

    c = sdpa_base();
    meta(&c, "scale", "nan");
    expect("NaN float", &c, ATTN_E_INVALID, "scale", "nan");

    c = sdpa_base();
    meta(&c, "scale", "1e999");
    expect("float overflow", &c, ATTN_E_INVALID, "scale", "1e999");

    c = sdpa_base();
    meta(&c, "causal_alignment", "middle");
    expect("bad choice", &c, ATTN_E_INVALID, "causal_alignment", "middle");

    c = mha_base(NULL);
    attn_st_writer_meta(c.w, "num_heads", "3");
    expect("heads do not divide embed_dim", &c, ATTN_E_INVALID, "num_heads", "embed_dim");

    c = begin("transformer_encoder_layer");
    meta(&c, "d_model", "6");
    meta(&c, "nhead", "4");
    F3(&c, "src", 1, 2, 6);
    expect("nhead does not divide d_model", &c, ATTN_E_INVALID, "nhead", NULL);

    c = begin("transformer_encoder_layer");
    meta(&c, "d_model", "4");
    meta(&c, "nhead", "2");
    meta(&c, "batch_first", "false");
    F3(&c, "src", 1, 2, 4);
    expect("batch_first false", &c, ATTN_E_UNSUPPORTED, "batch_first", NULL);

    c = begin("softmax");
    meta(&c, "dim", "0");
    F2(&c, "input", 2, 3);
    expect("softmax over dim 0", &c, ATTN_E_UNSUPPORTED, "dim", NULL);
    /* sdpa's window / soft-cap / ALiBi attributes */
    c = sdpa_base();
    meta(&c, "softcap", "-1");
    expect("negative softcap", &c, ATTN_E_INVALID, "softcap", NULL);

    c = sdpa_base();
    meta(&c, "softcap", "inf");
    expect("infinite softcap", &c, ATTN_E_INVALID, "softcap", NULL);

    c = sdpa_base();
    meta(&c, "window_left", "two");
    expect("bad window", &c, ATTN_E_INVALID, "window_left", "two");

    c = sdpa_base();
    meta(&c, "window_left", "1");
    meta(&c, "window_right", "0");
    meta(&c, "softcap", "5");
    F1(&c, "alibi_slopes", 2);
    expect("window + softcap + ALiBi", &c, ATTN_OK, NULL, NULL);

    c = sdpa_base();
    F1(&c, "alibi_slopes", 3); /* H = 2 */
    expect("ALiBi slopes of the wrong length", &c, ATTN_E_SHAPE, "alibi_slopes", NULL);

    c = sdpa_base();
    {
        float nan_slopes[2] = {0.5f, NAN};
        int64_t n2 = 2;
        raw(&c, "alibi_slopes", ATTN_F32, 1, &n2, nan_slopes);
    }
    expect("NaN ALiBi slope", &c, ATTN_E_INVALID, NULL, NULL);
}

static void test_tensors(void) {
    tcase c = mha_base("in_proj_weight");
    F2(&c, "in_proj_weight", 12, 5);
    expect("wrong parameter shape", &c, ATTN_E_SHAPE, "in_proj_weight", NULL);

    c = begin("sdpa");
    F4(&c, "query", 1, 2, 3, 4);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    F2(&c, "attn_mask", 2, 5);
    expect("mask that does not broadcast", &c, ATTN_E_BROADCAST, "attn_mask", NULL);

    c = begin("sdpa");
    float q[24];
    tu_fill(q, 24, 1, -1, 1);
    q[5] = NAN;
    int64_t s4[4] = {1, 2, 3, 4};
    raw(&c, "query", ATTN_F32, 4, s4, q);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    expect("NaN in query", &c, ATTN_E_NONFINITE, "query", NULL);

    c = sdpa_base();
    f32(&c, "attn_mask", 5, 1, 1, 1, 3, 3);
    expect("5-D tensor", &c, ATTN_E_SHAPE, "attn_mask", NULL);

    c = begin("sdpa");
    f32(&c, "query", 5, 1, 1, 2, 3, 4);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    expect("5-D query", &c, ATTN_E_SHAPE, "query", NULL);

    c = mha_base(NULL);
    meta(&c, "is_causal", "true");
    expect("is_causal without attn_mask", &c, ATTN_E_INVALID, "is_causal", "attn_mask");

    c = begin("sdpa");
    F4(&c, "query", 1, 2, 0, 4);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    expect("zero-size dimension", &c, ATTN_E_SHAPE, "query", NULL);

    c = begin("sdpa");
    F4(&c, "query", 1, 4, 3, 4);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    expect("H != Hkv without enable_gqa", &c, ATTN_E_SHAPE, "enable_gqa", NULL);

    c = begin("sdpa");
    unsigned char bq[24] = {0};
    raw(&c, "query", ATTN_BOOL, 4, s4, bq);
    F4(&c, "key", 1, 2, 3, 4);
    F4(&c, "value", 1, 2, 3, 4);
    expect("BOOL query", &c, ATTN_E_DTYPE, "query", NULL);

    c = sdpa_base();
    int64_t ids[9] = {0};
    int64_t s33[2] = {3, 3};
    raw(&c, "attn_mask", ATTN_I64, 2, s33, ids);
    expect("integer mask", &c, ATTN_E_DTYPE, "attn_mask", NULL);

    c = begin("embedding");
    int64_t toks[3] = {0, 7, 1}, s3[1] = {3};
    raw(&c, "input", ATTN_I64, 1, s3, toks);
    F2(&c, "weight", 5, 2);
    expect("embedding id out of range", &c, ATTN_E_INVALID, "7", NULL);

    c = begin("embedding");
    F1(&c, "input", 3);
    F2(&c, "weight", 5, 2);
    expect("float ids", &c, ATTN_E_DTYPE, "input", NULL);

    /* the seed's mask buffer must be triu(ones, 1) */
    c = begin("causal_attention");
    meta(&c, "d_in", "3");
    meta(&c, "d_out", "2");
    meta(&c, "context_length", "4");
    F3(&c, "x", 2, 3, 3);
    F2(&c, "W_query.weight", 2, 3);
    F2(&c, "W_key.weight", 2, 3);
    F2(&c, "W_value.weight", 2, 3);
    F2(&c, "mask", 4, 4);
    expect("seed mask not causal", &c, ATTN_E_INVALID, "mask", NULL);

    c = begin("causal_attention");
    meta(&c, "d_in", "3");
    meta(&c, "d_out", "2");
    meta(&c, "context_length", "2");
    F3(&c, "x", 2, 3, 3);
    F2(&c, "W_query.weight", 2, 3);
    F2(&c, "W_key.weight", 2, 3);
    F2(&c, "W_value.weight", 2, 3);
    expect("more tokens than context_length", &c, ATTN_E_SHAPE, "context_length", NULL);

    c = begin("transformer_decoder_layer");
    meta(&c, "d_model", "4");
    meta(&c, "nhead", "2");
    meta(&c, "memory_is_causal", "true");
    F3(&c, "tgt", 1, 2, 4);
    F3(&c, "memory", 1, 3, 4);
    expect("memory_is_causal without memory_mask", &c, ATTN_E_INVALID, "memory_mask", NULL);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Shape of tensor `name` in res is the ndim dims given (and it exists). */
static int has_shape(const attn_st *res, const char *name, int ndim, int64_t d0, int64_t d1,
                     int64_t d2, int64_t d3) {
    attn_st_tensor t;
    int64_t want[4] = {d0, d1, d2, d3};
    if (!res || attn_st_find(res, name, &t) != ATTN_OK || t.ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (t.shape[d] != want[d]) return 0;
    return 1;
}

static void test_backward(void) {
    attn_st *res = NULL;

    /* valid: multihead_attention gives the gradients of its inputs and every parameter */
    tcase c = mha_base(NULL);
    meta(&c, "backward", "true");
    F3(&c, "grad.out", 1, 3, 4);
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    TU_CHECK(has_shape(res, "out", 3, 1, 3, 4, 0), "mha backward: out");
    TU_CHECK(has_shape(res, "attn_weights", 3, 1, 3, 3, 0), "mha backward: attn_weights");
    TU_CHECK(has_shape(res, "grad.query", 3, 1, 3, 4, 0), "mha backward: grad.query");
    TU_CHECK(has_shape(res, "grad.key", 3, 1, 3, 4, 0), "mha backward: grad.key");
    TU_CHECK(has_shape(res, "grad.value", 3, 1, 3, 4, 0), "mha backward: grad.value");
    TU_CHECK(has_shape(res, "grad.in_proj_weight", 2, 12, 4, 0, 0), "grad.in_proj_weight");
    TU_CHECK(has_shape(res, "grad.in_proj_bias", 1, 12, 0, 0, 0), "grad.in_proj_bias");
    TU_CHECK(has_shape(res, "grad.out_proj.weight", 2, 4, 4, 0, 0), "grad.out_proj.weight");
    TU_CHECK(has_shape(res, "grad.out_proj.bias", 1, 4, 0, 0, 0), "grad.out_proj.bias");
    attn_st_free(res);
    res = NULL;

    /* the same case twice in one process gives the same gradients (module gradients start
     * from zero each time, they do not accumulate across calls) */
    attn_st *r1 = NULL, *r2 = NULL;
    for (int i = 0; i < 2; i++) {
        c = mha_base(NULL);
        meta(&c, "backward", "true");
        F3(&c, "grad.out", 1, 3, 4);
        TU_STATUS(run(&c, i ? &r2 : &r1), ATTN_OK, ctx);
    }
    if (r1 && r2) {
        attn_st_tensor a, b;
        int ok = attn_st_find(r1, "grad.in_proj_weight", &a) == ATTN_OK &&
                 attn_st_find(r2, "grad.in_proj_weight", &b) == ATTN_OK &&
                 a.nbytes == b.nbytes && !memcmp(a.data, b.data, a.nbytes);
        TU_CHECK(ok, "repeated backward: parameter gradients differ");
    }
    attn_st_free(r1);
    attn_st_free(r2);

    /* unbatched multihead_attention: 2-D grad.out and input gradients */
    c = begin("multihead_attention");
    meta(&c, "embed_dim", "4");
    meta(&c, "num_heads", "2");
    meta(&c, "backward", "true");
    F2(&c, "in_proj_weight", 12, 4);
    F1(&c, "in_proj_bias", 12);
    F2(&c, "out_proj.weight", 4, 4);
    F1(&c, "out_proj.bias", 4);
    F2(&c, "query", 3, 4);
    F2(&c, "key", 5, 4);
    F2(&c, "value", 5, 4);
    F2(&c, "grad.out", 3, 4);
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    TU_CHECK(has_shape(res, "grad.query", 2, 3, 4, 0, 0), "unbatched grad.query");
    TU_CHECK(has_shape(res, "grad.key", 2, 5, 4, 0, 0), "unbatched grad.key");
    attn_st_free(res);
    res = NULL;

    /* backward = false: a plain forward (grad.out then is refused) */
    c = mha_base(NULL);
    meta(&c, "backward", "false");
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    attn_st_tensor t;
    TU_CHECK(res && attn_st_find(res, "grad.query", &t) == ATTN_E_NOT_FOUND,
             "backward = false wrote gradients");
    attn_st_free(res);
    res = NULL;

    /* 3-D sdpa with a float mask: gradients in the file's shapes, incl. the mask's */
    c = begin("sdpa");
    meta(&c, "backward", "true");
    F3(&c, "query", 2, 3, 4);
    F3(&c, "key", 2, 5, 4);
    F3(&c, "value", 2, 5, 6);
    F2(&c, "attn_mask", 3, 5);
    F3(&c, "grad.out", 2, 3, 6);
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    TU_CHECK(has_shape(res, "grad.query", 3, 2, 3, 4, 0), "3-D sdpa grad.query");
    TU_CHECK(has_shape(res, "grad.value", 3, 2, 5, 6, 0), "3-D sdpa grad.value");
    TU_CHECK(has_shape(res, "grad.attn_mask", 2, 3, 5, 0, 0), "sdpa grad.attn_mask");
    attn_st_free(res);
    res = NULL;

    /* refusals */
    c = mha_base(NULL);
    meta(&c, "backward", "maybe");
    F3(&c, "grad.out", 1, 3, 4);
    expect("backward = maybe", &c, ATTN_E_INVALID, "backward", "maybe");

    c = mha_base(NULL);
    meta(&c, "backward", "true");
    expect("backward without grad.out", &c, ATTN_E_INVALID, "grad.out", NULL);

    c = mha_base(NULL);
    meta(&c, "backward", "true");
    F3(&c, "grad.out", 1, 3, 5);
    expect("grad.out of the wrong shape", &c, ATTN_E_SHAPE, "grad.out", "[1, 3, 4]");

    c = sdpa_base();
    meta(&c, "backward", "true");
    F3(&c, "grad.out", 2, 3, 4); /* out is [1, 2, 3, 4] */
    expect("grad.out with a dimension less", &c, ATTN_E_SHAPE, "grad.out", NULL);

    c = sdpa_base();
    meta(&c, "backward", "true");
    int64_t s4[4] = {1, 2, 3, 4};
    unsigned char bz[24] = {0};
    raw(&c, "grad.out", ATTN_BOOL, 4, s4, bz);
    expect("BOOL grad.out", &c, ATTN_E_DTYPE, "grad.out", NULL);

    c = sdpa_base();
    F4(&c, "grad.out", 1, 2, 3, 4);
    expect("grad.out without backward", &c, ATTN_E_INVALID, "grad.out", "backward");

    c = sdpa_base();
    meta(&c, "backward", "true");
    F4(&c, "grad.out", 1, 2, 3, 4);
    F4(&c, "grad.query", 1, 2, 3, 4);
    expect("a gradient given as input", &c, ATTN_E_INVALID, "grad.query", NULL);

    c = mha_base(NULL);
    meta(&c, "backward", "true");
    float g[12];
    tu_fill(g, 12, 3, -1, 1);
    g[7] = INFINITY;
    int64_t s134[3] = {1, 3, 4};
    raw(&c, "grad.out", ATTN_F32, 3, s134, g);
    expect("infinite grad.out", &c, ATTN_E_NONFINITE, NULL, NULL);

    /* cross_entropy */
    c = begin("cross_entropy");
    F2(&c, "input", 3, 5);
    int64_t tg[3] = {0, 4, 2}, s3[1] = {3}, s2[1] = {2};
    raw(&c, "target", ATTN_I64, 1, s3, tg);
    meta(&c, "reduction", "sum");
    expect("cross_entropy reduction sum", &c, ATTN_E_UNSUPPORTED, "reduction", NULL);

    c = begin("cross_entropy");
    F2(&c, "input", 3, 5);
    raw(&c, "target", ATTN_I64, 1, s2, tg);
    expect("cross_entropy target length", &c, ATTN_E_SHAPE, "target", NULL);

    c = begin("cross_entropy");
    F2(&c, "input", 3, 5);
    raw(&c, "target", ATTN_I64, 1, s3, tg);
    meta(&c, "backward", "true");
    float one = 1.0f;
    raw(&c, "grad.out", ATTN_F32, 0, NULL, &one);
    TU_STATUS(run(&c, &res), ATTN_OK, ctx);
    TU_CHECK(has_shape(res, "out", 0, 0, 0, 0, 0), "cross_entropy out is 0-d");
    TU_CHECK(has_shape(res, "grad.input", 2, 3, 5, 0, 0), "cross_entropy grad.input");
    attn_st_free(res);
    res = NULL;

    c = begin("cross_entropy");
    F2(&c, "input", 3, 5);
    raw(&c, "target", ATTN_I64, 1, s3, tg);
    meta(&c, "backward", "true");
    F1(&c, "grad.out", 1);
    expect("cross_entropy grad.out [1] for a 0-d loss", &c, ATTN_E_SHAPE, "grad.out", NULL);
}

/* llama_attention E=8, 2 heads, 1 kv head (D=4), T=3, attributes and parameters except the
 * one named in skip. */
static tcase llama_attn_base(const char *skip) {
    tcase c = begin("llama_attention");
    meta(&c, "hidden_size", "8");
    if (!skip || strcmp(skip, "num_attention_heads")) meta(&c, "num_attention_heads", "2");
    meta(&c, "num_key_value_heads", "1");
    const char *names[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};
    const int64_t d0[] = {8, 4, 4, 8};
    for (int i = 0; i < 4; i++)
        if (!skip || strcmp(skip, names[i])) F2(&c, names[i], d0[i], 8);
    F3(&c, "hidden_states", 1, 3, 8);
    return c;
}

static void test_llama(void) {
    tcase c = llama_attn_base(NULL);
    expect("llama_attention base", &c, ATTN_OK, NULL, NULL);
    c = llama_attn_base("num_attention_heads");
    expect("llama_attention without heads", &c, ATTN_E_INVALID, "num_attention_heads", NULL);
    c = llama_attn_base("k_proj.weight");
    expect("llama_attention without k_proj", &c, ATTN_E_NOT_FOUND, "k_proj.weight", NULL);
    c = llama_attn_base(NULL);
    F1(&c, "q_proj.bias", 8);
    expect("a bias without attention_bias", &c, ATTN_E_INVALID, "q_proj.bias", NULL);
    c = llama_attn_base(NULL);
    meta(&c, "num_key_value_heads", "3");
    expect("kv heads not dividing heads", &c, ATTN_E_INVALID, "num_key_value_heads", NULL);
    c = llama_attn_base(NULL);
    meta(&c, "hidden_act", "gelu");
    expect("llama hidden_act gelu", &c, ATTN_E_INVALID, "hidden_act", NULL);
    c = llama_attn_base(NULL);
    int64_t pos[3] = {0, 1, -2}, s3[1] = {3};
    raw(&c, "position_ids", ATTN_I64, 1, s3, pos);
    expect("a negative position", &c, ATTN_E_INVALID, "position", NULL);
    c = llama_attn_base(NULL);
    meta(&c, "backward", "true");
    F3(&c, "grad.out", 1, 3, 8);
    expect("llama_attention backward", &c, ATTN_OK, NULL, NULL);
    c = llama_attn_base(NULL);
    meta(&c, "backward", "true");
    F3(&c, "grad.out", 1, 4, 8);
    expect("llama_attention grad.out shape", &c, ATTN_E_SHAPE, "grad.out", NULL);
    c = llama_attn_base(NULL);
    meta(&c, "rope_interleaved", "maybe");
    expect("llama_attention rope_interleaved not a bool", &c, ATTN_E_INVALID,
           "rope_interleaved", NULL);
    int64_t p3[3] = {0, 1, 2};
    c = begin("rotary_embedding");
    F4(&c, "q", 1, 2, 3, 4);
    F4(&c, "k", 1, 1, 3, 4);
    raw(&c, "position_ids", ATTN_I64, 1, s3, p3);
    F4(&c, "grad.k_embed", 1, 1, 3, 4);
    expect("rotary_embedding grad.k_embed without backward", &c, ATTN_E_INVALID,
           "grad.k_embed", NULL);
    c = begin("rotary_embedding");
    F4(&c, "q", 1, 2, 3, 4);
    F4(&c, "k", 1, 1, 3, 4);
    raw(&c, "position_ids", ATTN_I64, 1, s3, p3);
    meta(&c, "backward", "true");
    F4(&c, "grad.out", 1, 2, 3, 4);
    F4(&c, "grad.k_embed", 1, 2, 3, 4);
    expect("rotary_embedding grad.k_embed shape", &c, ATTN_E_SHAPE, "grad.k_embed", NULL);
    c = begin("rotary_embedding");
    F4(&c, "q", 1, 2, 3, 4);
    F4(&c, "k", 1, 1, 3, 4);
    raw(&c, "position_ids", ATTN_I64, 1, s3, p3);
    meta(&c, "backward", "true");
    F4(&c, "grad.out", 1, 2, 3, 4);
    expect("rotary_embedding backward without grad.k_embed", &c, ATTN_OK, NULL, NULL);
    c = begin("rotary_embedding");
    F4(&c, "q", 1, 2, 3, 5);
    F4(&c, "k", 1, 1, 3, 5);
    raw(&c, "position_ids", ATTN_I64, 1, s3, pos);
    expect("rotary_embedding odd head dim", &c, ATTN_E_SHAPE, "odd", NULL);
    c = begin("rms_norm");
    F2(&c, "hidden_states", 2, 6);
    F1(&c, "weight", 5);
    expect("rms_norm weight shape", &c, ATTN_E_SHAPE, "weight", NULL);
    c = begin("rms_norm");
    F2(&c, "hidden_states", 2, 6);
    F1(&c, "weight", 6);
    meta(&c, "backward", "true");
    F2(&c, "grad.out", 2, 6);
    expect("rms_norm backward", &c, ATTN_OK, NULL, NULL);
    /* llama_for_causal_lm: V = 5, E = 8, 2 heads, 1 layer, F = 4, tied */
    for (int k = 0; k < 5; k++) {
        c = begin("llama_for_causal_lm");
        meta(&c, "hidden_size", "8");
        meta(&c, "num_attention_heads", "2");
        meta(&c, "intermediate_size", "4");
        meta(&c, "vocab_size", "5");
        meta(&c, "num_hidden_layers", "1");
        meta(&c, "tie_word_embeddings", "true");
        const char *nm[] = {"model.layers.0.self_attn.q_proj.weight",
                            "model.layers.0.self_attn.k_proj.weight",
                            "model.layers.0.self_attn.v_proj.weight",
                            "model.layers.0.self_attn.o_proj.weight",
                            "model.layers.0.mlp.gate_proj.weight",
                            "model.layers.0.mlp.up_proj.weight",
                            "model.layers.0.mlp.down_proj.weight"};
        const int64_t r[] = {8, 8, 8, 8, 4, 4, 8}, cl[] = {8, 8, 8, 8, 8, 8, 4};
        for (int i = 0; i < 7; i++) F2(&c, nm[i], r[i], cl[i]);
        F1(&c, "model.layers.0.input_layernorm.weight", 8);
        F1(&c, "model.layers.0.post_attention_layernorm.weight", 8);
        F1(&c, "model.norm.weight", 8);
        F2(&c, "model.embed_tokens.weight", 5, 8);
        static int64_t ids[3] = {0, 4, 2}, bad[3] = {0, 5, 2}, lab[3] = {1, 2, -100};
        const int64_t s13[2] = {1, 3}, s12[2] = {1, 2};
        raw(&c, "input_ids", ATTN_I64, 2, s13, k == 1 ? bad : ids);
        if (k >= 2) raw(&c, "labels", ATTN_I64, 2, k == 4 ? s12 : s13, lab);
        if (k == 0) {
            expect("llama_for_causal_lm", &c, ATTN_OK, NULL, NULL);
        } else if (k == 1) {
            expect("llama_for_causal_lm id out of range", &c, ATTN_E_INVALID, "token id", NULL);
        } else if (k == 2) {
            meta(&c, "backward", "true");
            F3(&c, "grad.out", 1, 3, 5);
            expect("llama_for_causal_lm loss with grad.out of the logits", &c, ATTN_E_SHAPE,
                   "grad.out", NULL);
        } else if (k == 3) {
            meta(&c, "backward", "true");
            raw(&c, "grad.out", ATTN_F32, 0, NULL, &(float){1.0f});
            expect("llama_for_causal_lm loss backward", &c, ATTN_OK, NULL, NULL);
        } else {
            expect("llama_for_causal_lm labels shape", &c, ATTN_E_SHAPE, "labels", NULL);
        }
    }
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    test_valid();
    test_names();
    test_values();
    test_tensors();
    test_backward();
    test_llama();
    TU_CHECK(attn_eval(ctx, NULL, NULL) == ATTN_E_INVALID, "NULL arguments");
    TU_CHECK(attn_eval(NULL, NULL, NULL) == ATTN_E_INVALID, "NULL context");
    int n = 0;
    for (const char *const *op = attn_eval_ops(); *op; op++) n++;
    TU_CHECK(n == 34, "attn_eval_ops lists %d ops, expected 34", n);
    attn_ctx_free(ctx);
    return tu_finish("test_eval_errors");
}
