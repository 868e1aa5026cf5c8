/* libFuzzer target: the JSON side of the BERT folder loader (attn_bert_load).
 *
 * An input is up to four files separated by FZ_SEP ("\x1e\x1e"):
 *     config.json, modules.json, 1_Pooling/config.json, sentence_bert_config.json
 * A file whose segment is absent is removed, so the loader's "missing" paths run too.  The
 * rest of the folder is tests/fixtures/bert_tiny as it is (model.safetensors, vocab.txt,
 * tokenizer_config.json), so a config that agrees with those weights gets through to model
 * construction: every size config.json claims is checked against the tensors there.
 *
 * Promises checked: no sanitizer report, leak or hang; a failure is a proper status with a
 * message; a loaded model has a sane info block, tokenises within max_seq_length and embeds
 * two texts (one past max_seq_length) into finite vectors, of unit norm when normalised. */
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
    dir = fz_make_dir("hf");
    static const char *const fixed[] = {"model.safetensors", "vocab.txt",
                                        "tokenizer_config.json"};
    char src[1024];
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof src, "%s/bert_tiny/%s", fx, fixed[i]);
        fz_copy(src, dir, fixed[i]);
    }
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/1_Pooling", dir);
    FZ_CHECK(mkdir(sub, 0700) == 0);
    return 0;
}

static const char *const files[4] = {"config.json", "modules.json", "1_Pooling/config.json",
                                     "sentence_bert_config.json"};

static void use(attn_ctx *ctx, const attn_bert *b) {
    attn_bert_info in;
    FZ_CHECK(attn_bert_get_info(b, &in) == ATTN_OK);
    FZ_CHECK(in.hidden_size > 0 && in.num_heads > 0 && in.hidden_size % in.num_heads == 0);
    FZ_CHECK(in.num_layers > 0 && in.intermediate_size > 0 && in.vocab_size > 0);
    FZ_CHECK(in.max_seq_length >= 2 && in.max_seq_length <= in.max_position_embeddings);
    FZ_CHECK(in.layer_norm_eps > 0 && in.layer_norm_eps < 1);
    FZ_CHECK(in.pooling >= ATTN_BERT_POOL_MEAN && in.pooling <= ATTN_BERT_POOL_MAX);
    FZ_CHECK(in.normalize == 0 || in.normalize == 1);

    /* tokens: truncated to max_seq_length, every id inside the vocabulary */
    static const char long_text[] =
        "the quick brown fox jumps over the lazy dog, hello world! cafe au lait s'il vous "
        "plait: a naive facade. the quick brown fox jumps over the lazy dog, hello world! "
        "cafe au lait s'il vous plait: a naive facade. the quick brown fox jumps over the lazy "
        "dog, hello world! cafe au lait s'il vous plait: a naive facade.";
    int32_t ids[600];
    int64_t n = -1;
    FZ_CHECK(attn_bert_tokenize(ctx, b, long_text, ids, 600, &n) == ATTN_OK);
    FZ_CHECK(n >= 2 && n <= in.max_seq_length);
    for (int64_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < in.vocab_size);

    const char *texts[2] = {"hello world", long_text};
    size_t E = (size_t)in.hidden_size;
    float *out = malloc(2 * E * sizeof *out);
    FZ_CHECK(out != NULL);
    attn_status s = attn_bert_embed(ctx, b, texts, 2, out);
    FZ_CHECK(s == ATTN_OK);
    fz_all_finite(out, 2 * E);
    if (in.normalize)
        for (int r = 0; r < 2; r++) {
            double ss = 0;
            for (size_t e = 0; e < E; e++) ss += (double)out[r * E + e] * out[r * E + e];
            FZ_CHECK(ss < 1.0001 && (ss > 0.9999 || ss == 0));
        }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_seg seg[4];
    int k = fz_split(data, size, seg, 4);
    for (int i = 0; i < 4; i++) {
        if (i < k) fz_put(dir, files[i], seg[i].p, seg[i].n);
        else fz_remove(dir, files[i]);
    }
    attn_ctx *ctx = fz_ctx(1 << 20, 4, 4096, 1 << 16);
    attn_bert *b = (attn_bert *)&ctx; /* must come back NULL on failure */
    attn_status s = attn_bert_load(ctx, dir, &b);
    if (s != ATTN_OK) {
        fz_failed(ctx, s);
        FZ_CHECK(b == NULL);
    } else {
        fz_loaded("BERT folder");
        use(ctx, b);
        attn_bert_free(b);
    }
    return 0;
}
