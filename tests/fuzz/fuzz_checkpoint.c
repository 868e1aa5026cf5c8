/* libFuzzer target: the checkpoint loaders of `attn generate` and `attn translate`
 * (attn_charlm_load, attn_dates_load: safetensors files whose metadata holds the config).
 *
 * An input is one file.  It is written into this process's folder and handed to both loaders,
 * as the commands would load it (one of them refuses it by its "task" metadata at least).
 * A model that loads is then used once: the charlm model's logits on a few bytes and two
 * sampled characters; the dates model translates one date with its cross-attention weights.
 * Seeds: real tiny checkpoints from `attn train charlm|dates --steps 2` (make_corpus.sh).
 *
 * Promises checked: no sanitizer report, leak or hang; a failure is a proper status with a
 * message and leaves the model NULL; a loaded model runs (ATTN_OK), samples only bytes of its
 * vocabulary, writes a NUL-terminated translation, and, when every weight is at most
 * WMAX in magnitude, gives finite logits and cross-attention weights in [0, 1].  (Finite but
 * enormous weights may overflow float arithmetic as they would in PyTorch: not a loader
 * bug.) */
#include "fuzz_util.h"
#include "attn_tasks.h"

#define WMAX 16.0f

static const char *dir;
static char path[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    dir = fz_make_dir("ck");
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
    return 0;
}

static void use_charlm(attn_ctx *ctx, const attn_charlm_config *c, const attn_module *m) {
    FZ_CHECK(c->vocab_size >= 1 && c->vocab_size <= 255 && c->block_size >= 1);
    int in_vocab[256] = {0};
    for (int i = 0; i < c->vocab_size; i++) {
        FZ_CHECK(c->vocab[i] != 0 && (i == 0 || c->vocab[i] > c->vocab[i - 1]));
        in_vocab[c->vocab[i]] = 1;
    }
    float wmax = fz_max_abs_param(m);
    /* the logits of up to 3 tokens */
    int64_t T = c->block_size < 3 ? c->block_size : 3, V = c->vocab_size;
    int64_t ids[3] = {0, (V - 1) / 2, V - 1};
    float logits[3 * 255];
    int64_t is[2] = {1, T}, ls[3] = {1, T, V};
    attn_tensor Ids = attn_tensor_make(ids, ATTN_I64, 2, is);
    attn_tensor Lg = attn_tensor_make(logits, ATTN_F32, 3, ls);
    attn_status s = attn_gpt_forward(ctx, m, &Ids, NULL, &Lg);
    if (s != ATTN_OK) fprintf(stderr, "gpt forward: %s\n", attn_ctx_errmsg(ctx));
    FZ_CHECK(s == ATTN_OK);
    if (wmax <= WMAX) fz_all_finite(logits, (size_t)(T * V));
    /* two sampled bytes after a prompt of vocabulary bytes, one greedy byte after none */
    char prompt[4] = {0}, out[3];
    for (int i = 0; i < 3; i++) prompt[i] = (char)c->vocab[(i * 7) % c->vocab_size];
    s = attn_charlm_generate(ctx, m, c, prompt, 2, 0.8f, 0, 1, out, sizeof out);
    if (s != ATTN_OK) fprintf(stderr, "generate: %s\n", attn_ctx_errmsg(ctx));
    FZ_CHECK(s == ATTN_OK);
    FZ_CHECK(out[2] == 0 && in_vocab[(unsigned char)out[0]] && in_vocab[(unsigned char)out[1]]);
    FZ_CHECK(attn_charlm_generate(ctx, m, c, NULL, 1, 0.0f, 1, 7, out, 2) == ATTN_OK);
    FZ_CHECK(out[1] == 0 && in_vocab[(unsigned char)out[0]]);
}

static void use_dates(attn_ctx *ctx, const attn_dates_config *c, const attn_module *m) {
    (void)c;
    float wmax = fz_max_abs_param(m);
    static const char text[] = "21 Nov 2026";
    const size_t n = sizeof text - 1;
    float cross[11 * (sizeof text - 1)];
    char iso[16];
    memset(iso, 'x', sizeof iso);
    attn_status s = attn_dates_translate(ctx, m, c, text, iso, sizeof iso, cross);
    if (s != ATTN_OK) fprintf(stderr, "translate: %s\n", attn_ctx_errmsg(ctx));
    FZ_CHECK(s == ATTN_OK);
    FZ_CHECK(memchr(iso, 0, sizeof iso) != NULL);
    if (wmax <= WMAX)
        for (size_t i = 0; i < 11 * n; i++) FZ_CHECK(cross[i] >= 0.0f && cross[i] <= 1.0f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_put(dir, "checkpoint.safetensors", data, size);
    attn_ctx *ctx = fz_ctx(1 << 20, 4, 4096, 1 << 16);
    {
        attn_charlm_config c;
        attn_module *m = (attn_module *)&ctx; /* must come back NULL on failure */
        attn_status s = attn_charlm_load(ctx, path, &c, &m);
        if (s != ATTN_OK) {
            fz_failed(ctx, s);
            FZ_CHECK(m == NULL);
        } else {
            fz_loaded("charlm checkpoint");
            use_charlm(ctx, &c, m);
            attn_module_free(m);
        }
    }
    {
        attn_dates_config c;
        attn_module *m = (attn_module *)&ctx;
        attn_status s = attn_dates_load(ctx, path, &c, &m);
        if (s != ATTN_OK) {
            fz_failed(ctx, s);
            FZ_CHECK(m == NULL);
        } else {
            fz_loaded("dates checkpoint");
            use_dates(ctx, &c, m);
            attn_module_free(m);
        }
    }
    return 0;
}
