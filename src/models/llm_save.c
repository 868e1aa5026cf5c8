/* Writing a trainable attn_llm out (attn.h, "Writing a model out"): attn_llm_save_hf, a
 * Hugging Face folder of the model's family (model.safetensors, config.json, the source
 * folder's tokenizer files), and attn_llm_save_gguf, a GGUF file of architecture llama (F32 or
 * Q8_0) with tokenizer.* keys copied byte for byte from a GGUF file or converted from the
 * model's byte-level tokenizer.  Every file goes through attn_file_out (a temporary file
 * renamed over the target once complete).  The layout of q_proj and k_proj rows: the model
 * knows it (rope_interleaved, set by the GGUF loader); HF files hold HF's order, GGUF files
 * llama.cpp's converter's (HF row j D/2 + i of a head is GGUF row 2i + j). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/file.h"
#include "../io/gguf_write.h"
#include "../text/chat.h"
#include "llm_model.h"

/* The trainable model's module; ATTN_E_INVALID naming fn otherwise. */
static attn_status module_of(attn_ctx *ctx, const attn_llm *m, const char *fn,
                             const attn_module **mod) {
    ATTN_FAIL_IF(!m, ctx, ATTN_E_INVALID, "%s: model is NULL", fn);
    ATTN_FAIL_IF(!m->mod, ctx, ATTN_E_INVALID,
                 "%s: the model is not trainable (attn_llm_create, or attn_llm_make_trainable "
                 "on a loaded one)", fn);
    *mod = m->mod;
    return ATTN_OK;
}

/* Whether m's q/k rows are in GGUF's interleaved order (a GGUF source of the llama family). */
static int rows_interleaved(const attn_llm *m) {
    return m->cfg.num_layers > 0 && m->layers[0].at[0].rope_interleaved;
}

/* A buffer of at least n floats (*buf grown from ctx as needed). */
static attn_status grow(attn_ctx *ctx, float **buf, size_t *cap, int64_t n, const char *fn) {
    size_t bytes;
    ATTN_FAIL_IF(n < 0 || !attn__mul_size((size_t)n, sizeof(float), &bytes), ctx,
                 ATTN_E_OVERFLOW, "%s: a tensor of %lld elements is too large", fn, (long long)n);
    if (bytes <= *cap) return ATTN_OK;
    float *p = attn__malloc(ctx, bytes);
    ATTN_FAIL_IF(!p, ctx, ATTN_E_NOMEM, "%s: out of memory (%zu bytes)", fn, bytes);
    attn__free(ctx, *buf);
    *buf = p, *cap = bytes;
    return ATTN_OK;
}

/* The rows of a q or k matrix (heads x D rows of cols), permuted within each head:
 * to_gguf, HF row j D/2 + i -> row 2i + j; else the reverse. */
static void permute_rows(float *dst, const float *src, int64_t heads, int64_t D, int64_t cols,
                         int to_gguf) {
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < D / 2; i++)
            for (int64_t j = 0; j < 2; j++) {
                const int64_t hf = h * D + j * (D / 2) + i, gg = h * D + 2 * i + j;
                memcpy(dst + (to_gguf ? gg : hf) * cols, src + (to_gguf ? hf : gg) * cols,
                       sizeof *dst * (size_t)cols);
            }
}

/* c's HF family (attn_llm_family). */
static const char *family(const attn_llm_config *c) {
    const char *type = "llama", *arch;
    attn_llm_family(c, &type, &arch);
    return type;
}

/* ---- the HF folder ----------------------------------------------------------------------- */
#define FN_HF "attn_llm_save_hf"

/* The parameters as model.safetensors: q_proj and k_proj in HF's row order; Gemma's norm
 * weights, held as 1 + w, written as w. */
static attn_status save_hf_weights(attn_ctx *ctx, const attn_llm *llm, const attn_module *m,
                                   const char *path) {
    const attn_llm_config *c = &llm->cfg;
    const int interleaved = rows_interleaved(llm);
    const int plus_one = !strcmp(family(c), "gemma3_text");
    attn_st_writer *w;
    attn_status st = attn_st_writer_create(ctx, &w);
    if (st != ATTN_OK) return st;
    float *tmp = NULL;
    size_t cap = 0;
    for (size_t i = 0; st == ATTN_OK && i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor v;
        if ((st = attn_module_param_at(m, i, &name, &v)) != ATTN_OK) break;
        const int q = strstr(name, ".self_attn.q_proj.") != NULL;
        const int k = strstr(name, ".self_attn.k_proj.") != NULL;
        const size_t nl = strlen(name);
        const int64_t n = attn_tensor_numel(&v);
        if (plus_one && nl > 11 && !strcmp(name + nl - 11, "norm.weight")) {
            if ((st = grow(ctx, &tmp, &cap, n, FN_HF)) != ATTN_OK) break;
            for (int64_t j = 0; j < n; j++) tmp[j] = ((const float *)v.data)[j] - 1.0f;
            st = attn_st_writer_add(w, name, ATTN_F32, v.ndim, v.shape, tmp);
            continue;
        }
        if (!interleaved || !(q || k)) {
            st = attn_st_writer_add_view(w, name, &v);
            continue;
        }
        const int64_t heads = q ? c->num_heads : c->num_kv_heads, D = c->head_dim;
        const int64_t cols = v.ndim == 2 ? v.shape[1] : 1;
        ATTN_TRYG(heads * D * cols == n
                      ? ATTN_OK
                      : attn__fail(ctx, ATTN_E_INVALID, FN_HF ": %s has %lld elements, not "
                                   "%lld heads x %lld x %lld", name, (long long)n,
                                   (long long)heads, (long long)D, (long long)cols));
        if ((st = grow(ctx, &tmp, &cap, n, FN_HF)) != ATTN_OK) break;
        permute_rows(tmp, v.data, heads, D, cols, 0);
        st = attn_st_writer_add(w, name, ATTN_F32, v.ndim, v.shape, tmp);
    }
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "format", "pt");
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
done:
    attn__free(ctx, tmp);
    attn_st_writer_free(w);
    return st;
}

/* config.json of the model's family, with the keys transformers writes for it (and
 * attn_llm_load_hf reads back): RoPE as rope_parameters (Gemma 3: one set per layer type),
 * Gemma's layer types, window and activation. */
static attn_status write_config_json(attn_ctx *ctx, const char *path, const attn_llm *m) {
    const attn_llm_config *c = &m->cfg;
    const char *type = "llama", *arch = "LlamaForCausalLM";
    attn_llm_family(c, &type, &arch);
    const int gemma = !strcmp(type, "gemma3_text");
    char bos[24] = "null", eos[24] = "null", rope[512];
    /* the family's keys: a line of layer types, at most 23 bytes a layer */
    size_t famcap, textcap;
    ATTN_FAIL_IF(c->num_layers < 0 || (uint64_t)c->num_layers > SIZE_MAX / 64, ctx,
                 ATTN_E_OVERFLOW, FN_HF ": %lld layers", (long long)c->num_layers);
    famcap = 512 + (size_t)c->num_layers * 24, textcap = 4096 + famcap;
    char *fam = attn__malloc(ctx, famcap);
    ATTN_FAIL_IF(!fam, ctx, ATTN_E_NOMEM, FN_HF ": out of memory");
    fam[0] = 0;
    if (m->bos >= 0) snprintf(bos, sizeof bos, "%d", (int)m->bos);
    if (m->eos >= 0) snprintf(eos, sizeof eos, "%d", (int)m->eos);
    if (gemma) {
        snprintf(rope, sizeof rope,
                 "{\"full_attention\": {\"rope_theta\": %.9g, \"rope_type\": \"default\"}, "
                 "\"sliding_attention\": {\"rope_theta\": %.9g, \"rope_type\": \"default\"}}",
                 c->rope_theta, c->rope_theta_local != 0 ? c->rope_theta_local : c->rope_theta);
    } else if (c->rope_scaling == 2) {
        snprintf(rope, sizeof rope,
                 "{\"rope_theta\": %.9g, \"rope_type\": \"llama3\", \"factor\": %.9g, "
                 "\"low_freq_factor\": %.9g, \"high_freq_factor\": %.9g, "
                 "\"original_max_position_embeddings\": %lld}",
                 c->rope_theta, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                 (long long)c->rope_original_context);
    } else if (c->rope_scaling == 1) {
        snprintf(rope, sizeof rope,
                 "{\"rope_theta\": %.9g, \"rope_type\": \"linear\", \"factor\": %.9g}",
                 c->rope_theta, c->rope_factor);
    } else {
        snprintf(rope, sizeof rope, "{\"rope_theta\": %.9g, \"rope_type\": \"default\"}",
                 c->rope_theta);
    }
    size_t at = 0;
    if (gemma) { /* the layer types: every sliding_period-th global */
        at += (size_t)snprintf(fam, famcap,
                               "  \"hidden_activation\": \"gelu_pytorch_tanh\",\n"
                               "  \"query_pre_attn_scalar\": %lld,\n  \"layer_types\": [",
                               (long long)c->head_dim);
        for (int64_t i = 0; i < c->num_layers && at < famcap; i++) {
            const int local = c->sliding_window > 0 &&
                              (c->sliding_period == 0 || (i + 1) % c->sliding_period != 0);
            at += (size_t)snprintf(fam + at, famcap - at, "%s\"%s\"", i ? ", " : "",
                                   local ? "sliding_attention" : "full_attention");
        }
        if (at < famcap) at += (size_t)snprintf(fam + at, famcap - at, "],\n");
    } else {
        at += (size_t)snprintf(fam, famcap, "  \"hidden_act\": \"silu\",\n");
    }
    if (at < famcap && c->sliding_window > 0)
        at += (size_t)snprintf(fam + at, famcap - at, "  \"sliding_window\": %lld,\n",
                               (long long)c->sliding_window);
    char *text = at < famcap ? attn__malloc(ctx, textcap) : NULL; /* at < famcap: by its size */
    if (!text) {
        attn__free(ctx, fam);
        return at < famcap ? attn__fail(ctx, ATTN_E_NOMEM, FN_HF ": out of memory")
                           : attn__fail(ctx, ATTN_E_OVERFLOW, FN_HF ": config.json too long");
    }
    int n = snprintf(
        text, textcap,
        "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
        "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
        "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
        "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n"
        "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %.9g,\n"
        "  \"rope_parameters\": %s,\n  \"tie_word_embeddings\": %s,\n"
        "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n%s"
        "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
        arch, type, (long long)c->vocab_size, (long long)c->hidden_size,
        (long long)c->intermediate_size, (long long)c->num_layers, (long long)c->num_heads,
        (long long)c->num_kv_heads, (long long)c->head_dim, (long long)c->max_position_embeddings,
        c->rms_norm_eps, rope, c->tie_word_embeddings ? "true" : "false",
        c->attention_bias == 1 ? "true" : "false", c->mlp_bias ? "true" : "false", fam, bos, eos);
    attn_status st = n < 0 || (size_t)n >= textcap
                         ? attn__fail(ctx, ATTN_E_OVERFLOW, FN_HF ": config.json too long")
                         : attn_file_write(ctx, path, text, (size_t)n);
    attn__free(ctx, text);
    attn__free(ctx, fam);
    return st;
}

/* dir/name as a path in buf (ATTN_E_INVALID when it does not fit). */
static attn_status join(attn_ctx *ctx, char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    ATTN_FAIL_IF(n < 0 || (size_t)n >= cap, ctx, ATTN_E_INVALID,
                 FN_HF ": the path %.200s/%s is too long", dir, name);
    return ATTN_OK;
}

/* Copies src_dir/name to dst_dir/name, byte for byte, when it exists (a missing one is fine). */
static attn_status copy_if_there(attn_ctx *ctx, const char *src_dir, const char *dst_dir,
                                 const char *name) {
    char s[4200], d[4200];
    struct stat sb;
    ATTN_TRY(join(ctx, s, sizeof s, src_dir, name));
    ATTN_TRY(join(ctx, d, sizeof d, dst_dir, name));
    if (stat(s, &sb) != 0 && errno == ENOENT) return ATTN_OK;
    attn__fmap map = {0};
    ATTN_TRY(attn__file_map_read(ctx, s, name, 0, &map));
    const attn__piece piece = {map.data, map.len};
    attn_status st = attn__file_write(ctx, d, &piece, 1);
    attn__file_unmap(ctx, &map);
    return st;
}

attn_status attn_llm_save_hf(attn_ctx *ctx, const attn_llm *m, const char *tokenizer_dir,
                             const char *dir) {
    if (!ctx) return ATTN_E_INVALID;
    const attn_module *mod = NULL;
    ATTN_TRY(module_of(ctx, m, FN_HF, &mod));
    ATTN_FAIL_IF(!dir, ctx, ATTN_E_INVALID, FN_HF ": dir is NULL");
    char path[4200];
    ATTN_FAIL_IF(mkdir(dir, 0777) != 0 && errno != EEXIST, ctx, ATTN_E_IO,
                 FN_HF ": cannot create %.3000s: %s", dir, strerror(errno));
    ATTN_TRY(join(ctx, path, sizeof path, dir, "model.safetensors"));
    ATTN_TRY(save_hf_weights(ctx, m, mod, path));
    ATTN_TRY(join(ctx, path, sizeof path, dir, "config.json"));
    ATTN_TRY(write_config_json(ctx, path, m));
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json",
                                        "chat_template.jinja", "generation_config.json",
                                        "special_tokens_map.json"};
    for (size_t i = 0; tokenizer_dir && i < sizeof files / sizeof *files; i++)
        ATTN_TRY(copy_if_there(ctx, tokenizer_dir, dir, files[i]));
    return ATTN_OK;
}

/* ---- the GGUF file ----------------------------------------------------------------------- */
#define FN_GGUF "attn_llm_save_gguf"


int attn_llm_gguf_writable(const attn_llm *m) {
    return m && m->cfg.num_layers > 0 && !strcmp(family(&m->cfg), "llama") &&
           !m->cfg.rope_scaling;
}

/* The tokenizer.* keys of m's tokenizer (a byte-level BPE, from a tokenizer.json) as
 * llama.cpp's converter writes them: model gpt2, pre, tokens, token types, merges ("a b"), the
 * special ids, add_bos and the chat template.  Writes them when w is not NULL; *count gets
 * their number. */
static attn_status tok_keys(attn_ctx *ctx, attn__gguf_w *w, const attn_llm *m, uint64_t *count) {
    const attn_bpe *b = m->tok;
    attn_bpe_info info;
    ATTN_TRY(attn_bpe_get_info(b, &info));
    const char *tmpl = m->chat_template;
    if (attn__chat_template_is_named(tmpl)) tmpl = NULL; /* no Jinja for other readers */
    *count = 6 + (m->bos >= 0) + (m->eos >= 0) + (info.unk_id >= 0) + (tmpl != NULL);
    if (!w) return ATTN_OK;
    size_t bytes;
    ATTN_FAIL_IF(info.n_merges < 0 ||
                     !attn__mul_size((size_t)info.n_merges * 2 + 2, sizeof(int32_t), &bytes),
                 ctx, ATTN_E_OVERFLOW, FN_GGUF ": %lld merges", (long long)info.n_merges);
    int32_t *pairs = attn__malloc(ctx, bytes);
    ATTN_FAIL_IF(!pairs, ctx, ATTN_E_NOMEM, FN_GGUF ": out of memory for the merges");
    attn_status st = attn_bpe_merges(b, pairs, info.n_merges);
    if (st != ATTN_OK) {
        attn__free(ctx, pairs);
        return st;
    }
    uint64_t nm = 0;
    for (int64_t r = 0; r < info.n_merges; r++) nm += pairs[2 * r] >= 0;
    attn__gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
    attn__gguf_kv_str(w, "tokenizer.ggml.pre", info.pre);
    attn__gguf_str(w, "tokenizer.ggml.tokens");
    attn__gguf_u32(w, ATTN_GGUF_ARRAY), attn__gguf_u32(w, ATTN_GGUF_STRING);
    attn__gguf_u64(w, (uint64_t)info.vocab_size);
    for (int64_t i = 0; i < info.vocab_size; i++)
        attn__gguf_str(w, attn_bpe_token_text(b, (int32_t)i));
    attn__gguf_str(w, "tokenizer.ggml.token_type");
    attn__gguf_u32(w, ATTN_GGUF_ARRAY), attn__gguf_u32(w, ATTN_GGUF_INT32);
    attn__gguf_u64(w, (uint64_t)info.vocab_size);
    for (int64_t i = 0; i < info.vocab_size; i++)
        attn__gguf_u32(w, (uint32_t)attn_bpe_token_type(b, (int32_t)i));
    attn__gguf_str(w, "tokenizer.ggml.merges");
    attn__gguf_u32(w, ATTN_GGUF_ARRAY), attn__gguf_u32(w, ATTN_GGUF_STRING);
    attn__gguf_u64(w, nm);
    for (int64_t r = 0; r < info.n_merges; r++) {
        if (pairs[2 * r] < 0) continue;
        const char *x = attn_bpe_token_text(b, pairs[2 * r]);
        const char *y = attn_bpe_token_text(b, pairs[2 * r + 1]);
        attn__gguf_u64(w, strlen(x) + 1 + strlen(y));
        attn__gguf_put(w, x, strlen(x)), attn__gguf_put(w, " ", 1);
        attn__gguf_put(w, y, strlen(y));
    }
    attn__free(ctx, pairs);
    if (m->bos >= 0) attn__gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)m->bos);
    if (m->eos >= 0) attn__gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)m->eos);
    if (info.unk_id >= 0)
        attn__gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)info.unk_id);
    attn__gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", m->add_bos);
    if (tmpl) attn__gguf_kv_str(w, "tokenizer.chat_template", tmpl);
    return ATTN_OK;
}

/* HF parameter name -> GGUF tensor name: 1, or 0 when it has none, -1 when it does not fit. */
static int gguf_name(const char *hf, char *out, size_t n) {
    static const char *const map[][2] = {
        {"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."},
        {"self_attn.v_proj.", "attn_v."}, {"self_attn.o_proj.", "attn_output."},
        {"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."},
        {"mlp.down_proj.", "ffn_down."}, {"input_layernorm.", "attn_norm."},
        {"post_attention_layernorm.", "ffn_norm."}};
    int r = -1;
    if (!strcmp(hf, "model.embed_tokens.weight")) r = snprintf(out, n, "token_embd.weight");
    else if (!strcmp(hf, "model.norm.weight")) r = snprintf(out, n, "output_norm.weight");
    else if (!strcmp(hf, "lm_head.weight")) r = snprintf(out, n, "output.weight");
    else {
        int layer, used = 0;
        if (sscanf(hf, "model.layers.%d.%n", &layer, &used) != 1 || !used) return 0;
        for (size_t i = 0; i < sizeof map / sizeof *map && r < 0; i++) {
            size_t l = strlen(map[i][0]);
            if (!strncmp(hf + used, map[i][0], l))
                r = snprintf(out, n, "blk.%d.%s%s", layer, map[i][1], hf + used + l);
        }
    }
    return r < 0 ? 0 : (size_t)r < n ? 1 : -1;
}

/* The tokenizer the keys come from: tok's keys must make a tokenizer; without tok, m's must be
 * a byte-level BPE. */
static attn_status check_tokenizer(attn_ctx *ctx, const attn_llm *m, const attn_gguf *tok) {
    if (tok) {
        attn_gguf_kv kv;
        ATTN_FAIL_IF(attn_gguf_kv_find(tok, "tokenizer.ggml.model", &kv) != ATTN_OK, ctx,
                     ATTN_E_INVALID, FN_GGUF ": the tokenizer's GGUF has no tokenizer.ggml.* "
                     "keys");
        attn_bpe *check = NULL;
        attn_status st = attn_bpe_from_gguf(ctx, tok, &check);
        attn_bpe_free(check);
        return st;
    }
    ATTN_FAIL_IF(!m->tok, ctx, ATTN_E_INVALID,
                 FN_GGUF ": the model has no tokenizer: give a GGUF file's tokenizer.* keys");
    attn_bpe_info ti;
    ATTN_TRY(attn_bpe_get_info(m->tok, &ti));
    ATTN_FAIL_IF(ti.kind != ATTN_BPE_KIND_BYTE_LEVEL, ctx, ATTN_E_UNSUPPORTED,
                 FN_GGUF ": the model's tokenizer is %s, not byte-level BPE: give a GGUF "
                 "file's tokenizer.* keys", ti.pre);
    return ATTN_OK;
}

attn_status attn_llm_save_gguf(attn_ctx *ctx, const attn_llm *m, const attn_gguf *tok, int type,
                               const char *path) {
    if (!ctx) return ATTN_E_INVALID;
    const attn_module *mod = NULL;
    ATTN_TRY(module_of(ctx, m, FN_GGUF, &mod));
    ATTN_FAIL_IF(!path, ctx, ATTN_E_INVALID, FN_GGUF ": path is NULL");
    ATTN_FAIL_IF(type != ATTN_Q_F32 && type != ATTN_Q_Q8_0, ctx, ATTN_E_UNSUPPORTED,
                 FN_GGUF ": type %d (%s): F32 or Q8_0 only", type,
                 attn_qtype_name(type) ? attn_qtype_name(type) : "unknown");
    const attn_llm_config c = m->cfg;
    ATTN_FAIL_IF(!attn_llm_gguf_writable(m), ctx, ATTN_E_UNSUPPORTED,
                 FN_GGUF ": GGUF architecture llama holds Llama models; this one is %s%s",
                 family(&c), c.rope_scaling ? " with RoPE scaling" : "");
    ATTN_TRY(check_tokenizer(ctx, m, tok));
    const int q8 = type == ATTN_Q_Q8_0, interleaved = rows_interleaved(m);
    const uint64_t align = 32;
    const size_t np = attn_module_param_count(mod);
    /* the tensors: names, types, sizes and offsets first */
    char(*names)[96] = attn__calloc(ctx, np ? np : 1, sizeof *names);
    int *types = attn__calloc(ctx, np ? np : 1, sizeof *types);
    uint64_t *offs = attn__calloc(ctx, np ? np : 1, sizeof *offs), off = 0;
    size_t nt = 0, bufcap = 0, permcap = 0;
    void *buf = NULL;
    float *perm = NULL;
    attn__gguf_w w = {NULL, ATTN_OK, 0};
    attn_status st = ATTN_OK;
    if (!names || !types || !offs) {
        st = attn__fail(ctx, ATTN_E_NOMEM, FN_GGUF ": out of memory");
        goto done;
    }
    for (size_t i = 0; i < np; i++) {
        const char *name;
        attn_tensor v;
        ATTN_TRYG(attn_module_param_at(mod, i, &name, &v));
        const int named = gguf_name(name, names[i], sizeof names[i]);
        ATTN_FAIL_IFG(named < 0, ATTN_E_OVERFLOW, FN_GGUF ": the GGUF name of %.200s is over %zu bytes",
               name, sizeof names[i] - 1);
        if (!named) {
            names[i][0] = '\0';
            continue;
        }
        types[i] = q8 && v.ndim == 2 && v.shape[1] % 32 == 0 ? ATTN_Q_Q8_0 : ATTN_Q_F32;
        int64_t be = 1, bb = 4;
        if (types[i]) attn_qtype_block(types[i], &be, &bb);
        offs[i] = off;
        off += ((uint64_t)(attn_tensor_numel(&v) / be * bb) + align - 1) / align * align;
        nt++;
    }
    uint64_t nkv = 0;
    const size_t ntk = tok ? attn_gguf_kv_count(tok) : 0;
    if (!tok) ATTN_TRYG(tok_keys(ctx, NULL, m, &nkv));
    for (size_t i = 0; i < ntk; i++) {
        attn_gguf_kv kv;
        attn_gguf_kv_at(tok, i, &kv);
        if (!strncmp(kv.key, "tokenizer.", 10)) nkv++;
    }
    const int kd = c.head_dim * c.num_heads != c.hidden_size;
    nkv += 12 + (kd ? 2 : 0);
    ATTN_TRYG(attn__gguf_w_open(ctx, path, &w));
    attn__gguf_put(&w, "GGUF", 4), attn__gguf_u32(&w, 3);
    attn__gguf_u64(&w, nt), attn__gguf_u64(&w, nkv);
    attn__gguf_kv_str(&w, "general.architecture", "llama");
    attn__gguf_kv_str(&w, "general.name", "attn export");
    attn__gguf_kv_u32(&w, "general.file_type", q8 ? 7u : 0u);
    attn__gguf_kv_u32(&w, "llama.context_length", (uint32_t)c.max_position_embeddings);
    attn__gguf_kv_u32(&w, "llama.embedding_length", (uint32_t)c.hidden_size);
    attn__gguf_kv_u32(&w, "llama.block_count", (uint32_t)c.num_layers);
    attn__gguf_kv_u32(&w, "llama.feed_forward_length", (uint32_t)c.intermediate_size);
    attn__gguf_kv_u32(&w, "llama.attention.head_count", (uint32_t)c.num_heads);
    attn__gguf_kv_u32(&w, "llama.attention.head_count_kv", (uint32_t)c.num_kv_heads);
    attn__gguf_kv_f32(&w, "llama.rope.freq_base", (float)c.rope_theta);
    attn__gguf_kv_f32(&w, "llama.attention.layer_norm_rms_epsilon", (float)c.rms_norm_eps);
    attn__gguf_kv_u32(&w, "llama.vocab_size", (uint32_t)c.vocab_size);
    if (kd) {
        attn__gguf_kv_u32(&w, "llama.attention.key_length", (uint32_t)c.head_dim);
        attn__gguf_kv_u32(&w, "llama.attention.value_length", (uint32_t)c.head_dim);
    }
    /* the tokenizer keys, byte for byte from the source file, or from m's tokenizer */
    uint64_t written;
    if (!tok) ATTN_TRYG(tok_keys(ctx, &w, m, &written));
    for (size_t i = 0; i < ntk; i++) {
        attn_gguf_kv kv;
        const void *raw;
        size_t n;
        attn_gguf_kv_at(tok, i, &kv);
        if (strncmp(kv.key, "tokenizer.", 10) != 0) continue;
        ATTN_TRYG(attn__gguf_kv_raw(tok, i, &raw, &n));
        attn__gguf_put(&w, raw, n);
    }
    for (size_t i = 0; i < np; i++) {
        if (!names[i][0]) continue;
        const char *name;
        attn_tensor v;
        attn_module_param_at(mod, i, &name, &v);
        attn__gguf_str(&w, names[i]);
        attn__gguf_u32(&w, (uint32_t)v.ndim);
        for (int d = v.ndim - 1; d >= 0; d--) attn__gguf_u64(&w, (uint64_t)v.shape[d]);
        attn__gguf_u32(&w, (uint32_t)types[i]);
        attn__gguf_u64(&w, offs[i]);
    }
    attn__gguf_pad(&w, align);
    for (size_t i = 0; i < np && w.st == ATTN_OK; i++) {
        if (!names[i][0]) continue;
        const char *name;
        attn_tensor v;
        attn_module_param_at(mod, i, &name, &v);
        const int64_t n = attn_tensor_numel(&v);
        const float *data = v.data;
        const int qk = strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj.");
        if (qk && !interleaved) { /* HF rows -> GGUF's interleaved rows */
            const int64_t heads = strstr(name, "q_proj") ? c.num_heads : c.num_kv_heads;
            const int64_t cols = v.ndim == 2 ? v.shape[1] : 1;
            ATTN_TRYG(heads * c.head_dim * cols == n
                          ? ATTN_OK
                          : attn__fail(ctx, ATTN_E_INVALID, FN_GGUF ": %s has %lld elements",
                                       name, (long long)n));
            ATTN_TRYG(grow(ctx, &perm, &permcap, n, FN_GGUF));
            permute_rows(perm, data, heads, c.head_dim, cols, 1);
            data = perm;
        }
        attn__gguf_pad(&w, align); /* to offs[i]: the data section starts aligned */
        if (types[i]) {
            int64_t be, bb;
            attn_qtype_block(types[i], &be, &bb);
            const size_t nb = (size_t)(n / be * bb);
            if (nb > bufcap) {
                attn__free(ctx, buf);
                bufcap = 0;
                if (!(buf = attn__malloc(ctx, nb))) {
                    st = attn__fail(ctx, ATTN_E_NOMEM, FN_GGUF ": out of memory (%zu bytes)",
                                    nb);
                    goto done;
                }
                bufcap = nb;
            }
            ATTN_TRYG(attn_quantize(ctx, types[i], data, n, buf, nb));
            attn__gguf_put(&w, buf, nb);
        } else {
            attn__gguf_put(&w, data, sizeof *data * (size_t)n);
        }
    }
done:
    st = attn__gguf_w_close(&w, st); /* a failed write left its message in ctx */
    attn__free(ctx, names);
    attn__free(ctx, types);
    attn__free(ctx, offs);
    attn__free(ctx, buf);
    attn__free(ctx, perm);
    return st;
}
