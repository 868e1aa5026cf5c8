/* libFuzzer target: config.json of a Llama folder (attn_llm_load_hf).
 *
 * An input is the config.json text; the rest of the folder is tests/fixtures/llama_tiny as it
 * is (model.safetensors: vocabulary 256, hidden 64, 2 layers, 4 heads, 2 kv heads,
 * intermediate 128, tied, BF16), so a config that agrees with those weights gets through to the
 * model: every size config.json claims is checked against the tensors there before anything is
 * sized from it (a config of fewer layers than the file loads, the other tensors unused).
 *
 * Promises checked: no sanitizer report, leak or hang; a failure is a proper status with a
 * message and no model; a loaded model has a sane configuration, gives finite logits for three
 * tokens, and a session (prefill of two, decode of the third) gives those logits again within
 * float rounding; greedy sampling returns the argmax. */
#include "fuzz_util.h"

#ifndef ATTN_FUZZ_FIXTURES
#define ATTN_FUZZ_FIXTURES "tests/fixtures"
#endif

static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *fx = getenv("ATTN_FUZZ_FIXTURES");
    if (!fx) fx = ATTN_FUZZ_FIXTURES;
    dir = fz_make_dir("llm");
    char src[1024];
    snprintf(src, sizeof src, "%s/llama_tiny/model.safetensors", fx);
    fz_copy(src, dir, "model.safetensors");
    return 0;
}

static void use(attn_ctx *ctx, const attn_llm *m) {
    attn_llm_config c;
    FZ_CHECK(attn_llm_get_info(m, &c) == ATTN_OK);
    /* fewer layers than the file holds load (the rest is ignored, as transformers does) */
    FZ_CHECK(c.hidden_size == 64 && c.vocab_size == 256 && c.num_layers >= 1 &&
             c.num_layers <= 2);
    FZ_CHECK(c.num_heads > 0 && c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0);
    FZ_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0 && c.hidden_size % c.num_heads == 0);
    FZ_CHECK(c.rms_norm_eps > 0 && c.rope_theta >= 1 && c.max_position_embeddings >= 1);
    const int64_t V = c.vocab_size;
    const int64_t T = c.max_position_embeddings < 3 ? c.max_position_embeddings : 3;
    const int32_t ids[3] = {5, 200, 17};
    float *lg = malloc((size_t)(3 * V) * sizeof *lg), *one = malloc((size_t)V * sizeof *one);
    FZ_CHECK(lg && one);
    FZ_CHECK(attn_llm_forward(ctx, m, ids, 1, T, lg) == ATTN_OK);
    fz_all_finite(lg, (size_t)(T * V));
    attn_llm_session *s = NULL;
    FZ_CHECK(attn_llm_session_create(ctx, m, T, ATTN_F32, &s) == ATTN_OK);
    FZ_CHECK(attn_llm_session_prefill(ctx, s, ids, T - 1 > 0 ? T - 1 : 1, one) == ATTN_OK);
    if (T > 1) FZ_CHECK(attn_llm_session_decode(ctx, s, ids[T - 1], one) == ATTN_OK);
    FZ_CHECK(attn_llm_session_decode(ctx, s, 1, one) == ATTN_E_OVERFLOW); /* full */
    double e = 0, mx = 0;
    for (int64_t j = 0; j < V; j++) {
        const double d = fabs((double)one[j] - lg[(T - 1) * V + j]);
        e = d > e ? d : e;
        mx = fabs(lg[(T - 1) * V + j]) > mx ? fabs(lg[(T - 1) * V + j]) : mx;
    }
    FZ_CHECK(e <= 1e-4 * (mx > 1 ? mx : 1));
    attn_llm_session_free(s);
    attn_llm_sampler g = attn_llm_sampler_defaults();
    g.temperature = 0;
    int32_t id = -1;
    FZ_CHECK(attn_llm_sample(ctx, &g, one, V, ids, 3, NULL, &id) == ATTN_OK);
    for (int64_t j = 0; j < V; j++) FZ_CHECK(one[j] <= one[id]);
    free(lg);
    free(one);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_put(dir, "config.json", data, size);
    attn_ctx *ctx = fz_ctx(1 << 20, 4, 4096, 1 << 16);
    attn_llm *m = (attn_llm *)&ctx; /* must come back NULL on failure */
    attn_status s = attn_llm_load_hf(ctx, dir, &m);
    if (s != ATTN_OK) {
        fz_failed(ctx, s);
        FZ_CHECK(m == NULL);
    } else {
        fz_loaded("Llama folder");
        use(ctx, m);
        attn_llm_free(m);
    }
    return 0;
}
