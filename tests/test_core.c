/* Core: status list, context, allocator hooks, workspace, tensor views, dropout stream. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

static size_t live_allocs = 0, total_allocs = 0, fail_after = (size_t)-1;

static void *count_alloc(void *user, size_t n) {
    (void)user;
    if (total_allocs >= fail_after) return NULL;
    total_allocs++;
    void *p = malloc(n);
    if (p) live_allocs++;
    return p;
}
static void count_free(void *user, void *p) {
    (void)user;
    if (p) live_allocs--;
    free(p);
}

static void test_status(void) {
    TU_CHECK(strcmp(attn_strerror(ATTN_OK), "success") == 0, "OK message");
    TU_CHECK(strcmp(attn_status_name(ATTN_E_SHAPE), "ATTN_E_SHAPE") == 0, "name");
    TU_CHECK(strcmp(attn_strerror((attn_status)999), "unknown status") == 0, "unknown");
#define CHECK_ONE(name, value, msg) TU_CHECK(ATTN_##name == value && attn_strerror(ATTN_##name)[0], #name);
    ATTN_STATUS_MAP(CHECK_ONE)
#undef CHECK_ONE
}

static void test_ctx(void) {
    attn_ctx *ctx = NULL;
    attn_ctx_params p;
    memset(&p, 0, sizeof p);
    p.alloc = count_alloc; /* free missing: refused */
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_E_INVALID && ctx == NULL, "alloc without free");
    p.free = count_free;
    p.threads = -1;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_E_INVALID, "negative threads");
    p.threads = 2;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_OK, "create with hooks");
    TU_CHECK(attn_ctx_threads(ctx) == 2, "threads");
    TU_CHECK(strcmp(attn_ctx_errmsg(ctx), "") == 0, "no error yet");
    /* an op using the workspace goes through the hooks, and a module too */
    float x[6 * 4], y[6 * 4];
    tu_fill(x, 24, 1, -1, 1);
    attn_tensor X = attn_view3(x, 2, 3, 4), Y = attn_view3(y, 2, 3, 4);
    X.stride[0] = 12, X.stride[1] = 4; /* contiguous */
    attn_tensor Xt = X; /* transposed view [2, 4, 3] needs a copy */
    Xt.shape[1] = 4, Xt.shape[2] = 3, Xt.stride[1] = 1, Xt.stride[2] = 4;
    attn_tensor Yt = attn_view3(y, 2, 4, 3);
    TU_STATUS(attn_softmax(ctx, &Xt, &Yt), ATTN_OK, ctx);
    TU_CHECK(attn_ctx_workspace_peak(ctx) > 0, "workspace used");
    attn_module *m = NULL;
    attn_mha_config mc = attn_mha_defaults(8, 2);
    TU_STATUS(attn_mha_create(ctx, &mc, &m), ATTN_OK, ctx);
    attn_module_free(m);
    attn_module_free(NULL);
    attn_ctx_free(ctx);
    attn_ctx_free(NULL);
    TU_CHECK(live_allocs == 0, "every allocation through the hooks was freed (%zu left)", live_allocs);
    (void)Y;

    /* allocation failures at every point give ATTN_E_NOMEM, never a crash or a leak */
    for (size_t k = 0; k < 40; k++) {
        total_allocs = 0;
        fail_after = k;
        p.threads = 1;
        attn_status st = attn_ctx_create(&p, &ctx);
        if (st != ATTN_OK) {
            TU_CHECK(st == ATTN_E_NOMEM, "ctx create under failure");
            continue;
        }
        attn_transformer_config tc = attn_transformer_defaults(8, 2);
        tc.dim_feedforward = 16;
        tc.num_encoder_layers = tc.num_decoder_layers = 2;
        st = attn_transformer_create(ctx, &tc, &m);
        TU_CHECK(st == ATTN_OK || st == ATTN_E_NOMEM, "transformer create under failure: %s",
                 attn_status_name(st));
        if (st == ATTN_OK) {
            float src[2 * 3 * 8] = {0}, tgt[2 * 2 * 8] = {0}, out[2 * 2 * 8];
            attn_tensor S = attn_view3(src, 2, 3, 8), T = attn_view3(tgt, 2, 2, 8),
                        O = attn_view3(out, 2, 2, 8);
            st = attn_transformer_forward(ctx, m, &S, &T, NULL, NULL, &O);
            TU_CHECK(st == ATTN_OK || st == ATTN_E_NOMEM, "forward under failure");
            attn_module_free(m);
        }
        attn_ctx_free(ctx);
        TU_CHECK(live_allocs == 0, "no leak after failure at %zu", k);
    }
    fail_after = (size_t)-1;

    /* a fixed caller workspace never grows */
    static unsigned char ws[4096];
    memset(&p, 0, sizeof p);
    p.workspace = ws;
    p.workspace_size = sizeof ws;
    TU_CHECK(attn_ctx_create(&p, &ctx) == ATTN_OK, "fixed workspace");
    static float big[64 * 64], bigo[64 * 64];
    attn_tensor Bt = attn_view2(big, 64, 64), Bo = attn_view2(bigo, 64, 64);
    Bt.stride[0] = 1, Bt.stride[1] = 64; /* transposed: needs a 16 KB copy */
    TU_STATUS(attn_softmax(ctx, &Bt, &Bo), ATTN_E_WORKSPACE, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "workspace") != NULL, "workspace message");
    attn_ctx_free(ctx);
}

static void test_views(void) {
    int64_t shape[3] = {2, 3, 4};
    float d[24];
    attn_tensor t = attn_tensor_make(d, ATTN_F32, 3, shape);
    TU_CHECK(t.stride[0] == 12 && t.stride[1] == 4 && t.stride[2] == 1, "strides");
    TU_CHECK(attn_tensor_numel(&t) == 24, "numel");
    TU_CHECK(attn_tensor_is_contiguous(&t), "contiguous");
    attn_tensor bad = attn_tensor_make(d, ATTN_F32, 5, shape);
    TU_CHECK(bad.data == NULL, "5-D refused");
    int64_t huge[4] = {INT64_MAX / 2, 4, 1, 1};
    attn_tensor h = attn_tensor_make(d, ATTN_F32, 4, huge);
    TU_CHECK(attn_tensor_numel(&h) == -1, "numel overflow");
    TU_CHECK(attn_dtype_size(ATTN_BF16) == 2 && attn_dtype_size(ATTN_I64) == 8, "dtype sizes");
    TU_CHECK(strcmp(attn_dtype_name(ATTN_BOOL), "BOOL") == 0, "dtype name");
}

static void test_dropout_stream(void) {
    /* keep rate close to 1-p, deterministic, and different seeds/offsets differ */
    int kept = 0, diff_seed = 0, diff_off = 0, n = 100000;
    for (int i = 0; i < n; i++) {
        int k = attn_dropout_keep(42, 7, (uint64_t)i, 0.3f);
        kept += k;
        TU_CHECK(k == attn_dropout_keep(42, 7, (uint64_t)i, 0.3f), "deterministic");
        diff_seed += k != attn_dropout_keep(43, 7, (uint64_t)i, 0.3f);
        diff_off += k != attn_dropout_keep(42, 8, (uint64_t)i, 0.3f);
        if (tu_failures) break;
    }
    double rate = (double)kept / n;
    TU_CHECK(fabs(rate - 0.7) < 0.01, "keep rate %.4f, expected 0.7", rate);
    TU_CHECK(diff_seed > n / 5 && diff_off > n / 5, "streams differ (%d, %d)", diff_seed, diff_off);
    TU_CHECK(attn_dropout_keep(1, 2, 3, 0.0f) == 1, "p = 0 keeps all");
}

/* Workspace pointers are 64-byte aligned, also after a rewind reuses later blocks (blocks
 * come from malloc, which aligns less). */
static void test_workspace_alignment(void) {
    attn_ctx *ctx;
    attn_ctx_create(NULL, &ctx);
    for (int round = 0; round < 3; round++) {
        attn__mark m0 = attn__ws_mark(ctx);
        for (int i = 0; i < 40; i++) {
            void *p;
            size_t n = (size_t)(1 + i * 7919 % 300000); /* forces several blocks */
            TU_STATUS(attn__ws_alloc(ctx, n, 4, &p), ATTN_OK, ctx);
            TU_CHECK(((uintptr_t)p & 63) == 0, "workspace pointer %p not 64-byte aligned", p);
            if (i % 5 == 4) attn__ws_release(ctx, m0);
        }
        attn__ws_release(ctx, m0);
    }
    attn_ctx_free(ctx);
}

/* Two patterns of requests in turn on one context (a batched step's, then a sampler's): once
 * both have run, the workspace's blocks serve them without allocating again (each new block
 * at least doubles the last), and what each request gets is its own (no overlap). */
static int ws_mallocs;
static void *ws_count_alloc(void *user, size_t n) {
    (void)user;
    ws_mallocs++;
    return malloc(n);
}
static void ws_count_free(void *user, void *p) {
    (void)user;
    free(p);
}

static void test_workspace_patterns(void) {
    attn_ctx_params cp;
    memset(&cp, 0, sizeof cp);
    cp.threads = 1, cp.alloc = ws_count_alloc, cp.free = ws_count_free;
    attn_ctx *ctx = NULL;
    TU_CHECK(attn_ctx_create(&cp, &ctx) == ATTN_OK, "context with a counting allocator");
    if (!ctx) return;
    static const size_t pat[2][3] = {{3u << 20, 1u << 20, 0}, {200u << 10, 5u << 19, 5u << 20}};
    int after = 0;
    for (int round = 0; round < 12; round++) {
        if (round == 4) after = ws_mallocs;
        const size_t *sz = pat[round & 1];
        attn__mark m = attn__ws_mark(ctx);
        unsigned char *p[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3 && sz[i]; i++) {
            TU_STATUS(attn__ws_alloc(ctx, sz[i], 1, (void **)&p[i]), ATTN_OK, ctx);
            if (p[i]) memset(p[i], 17 + i, sz[i]);
        }
        for (int i = 0; i < 3 && sz[i]; i++)
            for (size_t k = 0; p[i] && k < sz[i]; k += 4093)
                TU_CHECK(p[i][k] == 17 + i, "round %d: request %d overwritten", round, i);
        attn__ws_release(ctx, m);
    }
    TU_CHECK(ws_mallocs == after, "the workspace allocated %d more times once both patterns "
             "had run", ws_mallocs - after);
    attn_ctx_free(ctx);
}

int main(void) {
    test_workspace_alignment();
    test_workspace_patterns();
    test_status();
    test_ctx();
    test_views();
    test_dropout_stream();
    return tu_finish("test_core");
}
