/* libFuzzer target: BERT's vocabulary reader, tokenizer settings and WordPiece tokenizer
 * (attn_bert_load, attn_bert_tokenize, attn_bert_embed).
 *
 * An input is up to three parts separated by FZ_SEP ("\x1e\x1e"):
 *     vocab.txt, tokenizer_config.json, the text to tokenise
 * (tokenizer_config.json is removed when its part is absent; the text is empty then, and ends
 * at its first NUL byte, as the API takes C strings).  The rest of the folder is a tiny model
 * written once at start-up: hidden size 2, one layer, 64 positions, vocab_size 512, so any
 * vocabulary of up to 512 lines loads and the model runs in microseconds.
 *
 * Promises checked: no sanitizer report, leak or hang; a failure is a proper status with a
 * message; on a loaded folder the text's tokens are [CLS] ... [SEP], at most max_seq_length
 * of them, each a line of vocab.txt, the same count whatever the output capacity; and the
 * embeddings of the text's first 24 bytes and of "" (padded) are finite. */
#include "fuzz_util.h"

enum { E = 2, INTER = 2, MAXPOS = 64, VOCAB = 512, TYPES = 2 };

/* the context of every call: files up to 1 MB, 4 layers, 512 vocabulary lines, texts (and
 * vocab.txt, tokenizer_config.json) up to 2 KB, so that longer ones (the seeds reach 2.3 KB)
 * are refused */
static attn_ctx *ctx_get(void) { return fz_ctx(1 << 20, 4, VOCAB, 2048); }

static const char *dir;

static void add(attn_st_writer *w, const char *name, int ndim, int64_t d0, int64_t d1,
                float base) {
    int64_t shape[2] = {d0, d1};
    int64_t n = ndim == 1 ? d0 : d0 * d1;
    float *v = malloc((size_t)n * sizeof *v);
    FZ_CHECK(v != NULL);
    for (int64_t i = 0; i < n; i++) v[i] = base + 0.5f * sinf(0.37f * (float)i + base);
    FZ_CHECK(attn_st_writer_add(w, name, ATTN_F32, ndim, shape, v) == ATTN_OK);
    free(v);
}

static void add_lin(attn_st_writer *w, const char *p, int64_t out, int64_t in) {
    char n[160];
    snprintf(n, sizeof n, "%s.weight", p);
    add(w, n, 2, out, in, 0.0f);
    snprintf(n, sizeof n, "%s.bias", p);
    add(w, n, 1, out, 0, 0.0f);
}

static void add_ln(attn_st_writer *w, const char *p) {
    char n[160];
    snprintf(n, sizeof n, "%s.weight", p);
    add(w, n, 1, E, 0, 1.0f);
    snprintf(n, sizeof n, "%s.bias", p);
    add(w, n, 1, E, 0, 0.0f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    dir = fz_make_dir("tok");
    char cfg[512];
    int n = snprintf(cfg, sizeof cfg,
                     "{\"model_type\": \"bert\", \"hidden_act\": \"gelu\", \"hidden_size\": %d, "
                     "\"num_hidden_layers\": 1, \"num_attention_heads\": 1, "
                     "\"intermediate_size\": %d, \"max_position_embeddings\": %d, "
                     "\"type_vocab_size\": %d, \"vocab_size\": %d, \"layer_norm_eps\": 1e-12, "
                     "\"pad_token_id\": 0}",
                     E, INTER, MAXPOS, TYPES, VOCAB);
    fz_put(dir, "config.json", cfg, (size_t)n);
    attn_ctx *ctx = ctx_get();
    attn_st_writer *w = NULL;
    FZ_CHECK(attn_st_writer_create(ctx, &w) == ATTN_OK);
    add(w, "embeddings.word_embeddings.weight", 2, VOCAB, E, 0.0f);
    add(w, "embeddings.position_embeddings.weight", 2, MAXPOS, E, 0.0f);
    add(w, "embeddings.token_type_embeddings.weight", 2, TYPES, E, 0.0f);
    add_ln(w, "embeddings.LayerNorm");
    add_lin(w, "encoder.layer.0.attention.self.query", E, E);
    add_lin(w, "encoder.layer.0.attention.self.key", E, E);
    add_lin(w, "encoder.layer.0.attention.self.value", E, E);
    add_lin(w, "encoder.layer.0.attention.output.dense", E, E);
    add_ln(w, "encoder.layer.0.attention.output.LayerNorm");
    add_lin(w, "encoder.layer.0.intermediate.dense", INTER, E);
    add_lin(w, "encoder.layer.0.output.dense", E, INTER);
    add_ln(w, "encoder.layer.0.output.LayerNorm");
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FZ_CHECK(attn_st_writer_save(w, path) == ATTN_OK);
    attn_st_writer_free(w);
    return 0;
}

static char *text;
static size_t text_cap;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_seg seg[3];
    int k = fz_split(data, size, seg, 3);
    fz_put(dir, "vocab.txt", seg[0].p, seg[0].n);
    if (k > 1) fz_put(dir, "tokenizer_config.json", seg[1].p, seg[1].n);
    else fz_remove(dir, "tokenizer_config.json");
    size_t tn = k > 2 ? seg[2].n : 0;
    if (tn + 1 > text_cap) {
        free(text);
        text_cap = tn + 1;
        text = malloc(text_cap);
        FZ_CHECK(text != NULL);
    }
    if (tn) memcpy(text, seg[2].p, tn);
    text[tn] = 0;
    /* lines of vocab.txt, counted as the loader counts them: the ids a token may have */
    int64_t lines = 0;
    for (size_t i = 0; i < seg[0].n; i++) lines += seg[0].p[i] == '\n';
    if (seg[0].n && seg[0].p[seg[0].n - 1] != '\n') lines++;

    attn_ctx *ctx = ctx_get();
    attn_bert *b = (attn_bert *)&ctx; /* must come back NULL on failure */
    attn_status s = attn_bert_load(ctx, dir, &b);
    if (s != ATTN_OK) {
        fz_failed(ctx, s);
        FZ_CHECK(b == NULL);
        return 0;
    }
    fz_loaded("BERT folder");
    attn_bert_info in;
    FZ_CHECK(attn_bert_get_info(b, &in) == ATTN_OK);
    FZ_CHECK(in.max_seq_length == MAXPOS && lines >= 1 && lines <= VOCAB);
    int32_t ids[MAXPOS + 1], first[2];
    int64_t n = -1, n2 = -1;
    s = attn_bert_tokenize(ctx, b, text, ids, MAXPOS + 1, &n);
    if (s != ATTN_OK) { /* only a text over ATTN_LIMIT_TEXT_BYTES may be refused */
        fz_failed(ctx, s);
        FZ_CHECK(strlen(text) > (size_t)attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES));
    } else {
        FZ_CHECK(strlen(text) <= (size_t)attn_ctx_limit(ctx, ATTN_LIMIT_TEXT_BYTES));
        FZ_CHECK(n >= 2 && n <= MAXPOS);
        for (int64_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < lines);
        /* the count does not depend on the capacity; the ids are the same */
        FZ_CHECK(attn_bert_tokenize(ctx, b, text, first, 2, &n2) == ATTN_OK && n2 == n);
        FZ_CHECK(first[0] == ids[0] && first[1] == ids[1]);
        /* [CLS] ... [SEP]: one more text with the same special tokens */
        int64_t ne = -1;
        int32_t empty[2];
        FZ_CHECK(attn_bert_tokenize(ctx, b, "", empty, 2, &ne) == ATTN_OK && ne == 2);
        FZ_CHECK(ids[0] == empty[0] && ids[n - 1] == empty[1]);
        /* the embeddings of the text's first bytes and of the empty text, in one batch (so
         * the shorter is padded with the [PAD] id): finite.  Only a prefix, for speed: the
         * encoder's arithmetic is fuzz_hf_config's business. */
        char head[25];
        snprintf(head, sizeof head, "%s", text);
        float out[2 * E];
        const char *texts[2] = {head, ""};
        FZ_CHECK(attn_bert_embed(ctx, b, texts, 2, out) == ATTN_OK);
        fz_all_finite(out, 2 * E);
    }
    attn_bert_free(b);
    return 0;
}
