/* attn train lm: fine-tunes an LLM of any family attn runs (a GGUF file, dequantized to F32 master
 * weights, or a HF folder) on a text file, with the model's own tokenizer, into a HF folder;
 * attn export: a llama model (GGUF, HF folder, train lm checkpoint) as a GGUF file (F32, Q8_0)
 * or a HF folder (docs/llm.md, "Fine-tuning"). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "pictures/pictures.h"

#define CMD "train lm"

static uint64_t fnv1a_ids(const int32_t *p, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < (size_t)n * sizeof *p; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The settings a resumed run must share with the run it continues (attn_train_setting). */
#define MAX_SETTINGS 16
static int settings(const attn_lm_train_config *r, uint64_t text_id, int64_t ntok, int64_t nval,
                    int dtype, attn_train_setting *s) {
    int n = 0;
    char hex[24];
    attn_train_setting_s(&s[n++], "train.dtype", "--dtype", attn_cli_dtype_name(dtype));
    attn_train_setting_i(&s[n++], "train.steps", "--steps", r->steps);
    attn_train_setting_i(&s[n++], "train.batch", "--batch", r->batch);
    attn_train_setting_i(&s[n++], "train.len", "--len", r->len);
    attn_train_setting_i(&s[n++], "train.warmup", "--warmup", r->warmup);
    attn_train_setting_i(&s[n++], "train.seed", "--seed", (long long)r->seed);
    attn_train_setting_f(&s[n++], "train.lr", "--lr", r->lr);
    attn_train_setting_f(&s[n++], "train.lr_min", "--min-lr", r->lr_min);
    attn_train_setting_f(&s[n++], "train.weight_decay", "--weight-decay", r->weight_decay);
    attn_train_setting_f(&s[n++], "train.clip", "--clip", r->clip);
    attn_train_setting_i(&s[n++], "train.held_out_tokens", "--held-out (the held-out tokens)",
                         nval);
    attn_train_setting_i(&s[n++], "train.text_tokens", "--text (its tokens)", ntok);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)text_id);
    attn_train_setting_s(&s[n++], "train.text_ids_fnv1a64", "--text (its token ids)", hex);
    return n;
}

/* The model's parameters as a HF model.safetensors: q_proj and k_proj of a GGUF source back in
 * HF's row order (llama.cpp's converter permutes the rows of each head: GGUF row 2i + j is HF
 * row j D/2 + i); plus_one (Gemma): the norm weights, held as 1 + w, written as w. */
static attn_status save_hf_weights(attn_ctx *ctx, const attn_module *m, int interleaved,
                                   int plus_one, int64_t H, int64_t Hkv, int64_t D,
                                   const char *path) {
    attn_st_writer *w;
    attn_status st = attn_st_writer_create(ctx, &w);
    if (st != ATTN_OK) return st;
    float *tmp = NULL;
    for (size_t i = 0; st == ATTN_OK && i < attn_module_param_count(m); i++) {
        const char *name;
        attn_tensor v;
        if ((st = attn_module_param_at(m, i, &name, &v)) != ATTN_OK) break;
        int q = strstr(name, ".self_attn.q_proj.") != NULL;
        int k = strstr(name, ".self_attn.k_proj.") != NULL;
        const size_t nl = strlen(name);
        if (plus_one && nl > 11 && !strcmp(name + nl - 11, "norm.weight")) {
            const int64_t n = attn_tensor_numel(&v);
            float *p = realloc(tmp, sizeof *tmp * (size_t)n);
            if (!p) {
                st = ATTN_E_NOMEM;
                break;
            }
            tmp = p;
            for (int64_t j = 0; j < n; j++) tmp[j] = ((const float *)v.data)[j] - 1.0f;
            st = attn_st_writer_add(w, name, ATTN_F32, v.ndim, v.shape, tmp);
            continue;
        }
        if (!interleaved || !(q || k)) {
            st = attn_st_writer_add_view(w, name, &v);
            continue;
        }
        int64_t heads = q ? H : Hkv, cols = v.ndim == 2 ? v.shape[1] : 1;
        float *p = realloc(tmp, sizeof *tmp * (size_t)(heads * D * cols));
        if (!p) {
            st = ATTN_E_NOMEM;
            break;
        }
        tmp = p;
        const float *src = v.data;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t ii = 0; ii < D / 2; ii++)
                for (int64_t j = 0; j < 2; j++)
                    memcpy(tmp + (h * D + j * (D / 2) + ii) * cols,
                           src + (h * D + 2 * ii + j) * cols, sizeof *tmp * (size_t)cols);
        st = attn_st_writer_add(w, name, ATTN_F32, v.ndim, v.shape, tmp);
    }
    free(tmp);
    if (st == ATTN_OK) st = attn_st_writer_meta(w, "format", "pt");
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

/* c's HF family (attn_llm_family: the library's table of families). */
static const char *family(const attn_llm_config *c) {
    const char *type = "llama", *arch;
    attn_llm_family(c, &type, &arch);
    return type;
}

/* Whether a GGUF file of c's family holds q/k rows permuted for GGML's rope: llama.cpp's
 * converter does it for llama (and Mistral, written as llama) only. */
static int gguf_permuted(const attn_llm_config *c) {
    return !strcmp(family(c), "llama") || !strcmp(family(c), "mistral");
}

/* Whether write_gguf can write c: a Llama model without RoPE scaling (architecture llama). */
static int gguf_writable(const attn_llm_config *c) {
    return !strcmp(family(c), "llama") && !c->rope_scaling;
}

/* config.json of c's family, with the keys transformers writes for it (and attn_llm_load_hf
 * reads back): RoPE as rope_parameters (Gemma 3: one set per layer type), Gemma's layer types,
 * window and activation. */
static attn_status write_config_json(attn_ctx *ctx, const char *path, const attn_llm_config *c,
                                     const attn_llm_special *sp) {
    const char *type = "llama", *arch = "LlamaForCausalLM";
    attn_llm_family(c, &type, &arch);
    const int gemma = !strcmp(type, "gemma3_text");
    char bos[24] = "null", eos[24] = "null", rope[512];
    /* the family's keys: a line of layer types, at most 23 bytes a layer */
    const size_t famcap = 512 + (size_t)c->num_layers * 24;
    char *fam = malloc(famcap);
    if (!fam)
        return ATTN_E_NOMEM;
    fam[0] = 0;
    if (sp->bos >= 0) snprintf(bos, sizeof bos, "%d", (int)sp->bos);
    if (sp->eos >= 0) snprintf(eos, sizeof eos, "%d", (int)sp->eos);
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
        if (at < famcap)
            at += (size_t)snprintf(fam + at, famcap - at, "],\n");
    } else {
        at += (size_t)snprintf(fam, famcap, "  \"hidden_act\": \"silu\",\n");
    }
    if (at < famcap && c->sliding_window > 0)
        at += (size_t)snprintf(fam + at, famcap - at, "  \"sliding_window\": %lld,\n",
                               (long long)c->sliding_window);
    char *text = at < famcap ? malloc(4096 + famcap) : NULL; /* at < famcap: by famcap's size */
    if (!text) {
        free(fam);
        return ATTN_E_NOMEM;
    }
    int n = snprintf(
        text, 4096 + famcap,
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
    attn_status st = n < 0 || (size_t)n >= 4096 + famcap
                         ? ATTN_E_OVERFLOW
                         : attn_file_write(ctx, path, text, (size_t)n);
    free(text), free(fam);
    return st;
}

/* Copies src_dir/name to dst_dir/name when it exists (a missing one is fine); 0 on failure
 * (printed). */
static int copy_if_there(const char *cmd, attn_ctx *ctx, const char *src_dir,
                         const char *dst_dir, const char *name) {
    char s[4200], d[4200];
    snprintf(s, sizeof s, "%s/%s", src_dir, name);
    snprintf(d, sizeof d, "%s/%s", dst_dir, name);
    FILE *in = fopen(s, "rb");
    if (!in && errno == ENOENT) return 1;
    if (!in) {
        fprintf(stderr, "attn %s: cannot read %s: %s\n", cmd, s, strerror(errno));
        return 0;
    }
    attn_file_out *out = NULL;
    attn_status st = attn_file_out_open(ctx, d, &out);
    char buf[65536];
    size_t n;
    while (st == ATTN_OK && (n = fread(buf, 1, sizeof buf, in)) > 0)
        st = attn_file_out_write(out, buf, n);
    int bad_read = ferror(in);
    fclose(in);
    if (st == ATTN_OK && bad_read) {
        fprintf(stderr, "attn %s: cannot read %s\n", cmd, s);
        attn_file_out_abort(out);
        return 0;
    }
    if (st == ATTN_OK) st = attn_file_out_commit(out);
    else attn_file_out_abort(out);
    if (st != ATTN_OK) attn_cli_fail(ctx, cmd, st);
    return st == ATTN_OK;
}

/* The trainable model llm as a HF folder out (created if missing): model.safetensors (HF's q/k
 * row order), config.json, and src_dir's tokenizer files when src_dir is not NULL.  0 on
 * failure (printed). */
static int write_hf(const char *cmd, attn_ctx *ctx, attn_llm *llm, int interleaved,
                    const attn_llm_special *sp, const char *src_dir, const char *out) {
    attn_llm_config cfg;
    char path[4200];
    const attn_module *m = attn_llm_module(llm);
    attn_status st = attn_llm_get_info(llm, &cfg);
    if (st == ATTN_OK && mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "attn %s: cannot create %s: %s\n", cmd, out, strerror(errno));
        return 0;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    if (st == ATTN_OK)
        st = save_hf_weights(ctx, m, interleaved && gguf_permuted(&cfg),
                             !strcmp(family(&cfg), "gemma3_text"), cfg.num_heads, cfg.num_kv_heads,
                             cfg.head_dim, path);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    snprintf(path, sizeof path, "%s/config.json", out);
    if ((st = write_config_json(ctx, path, &cfg, sp)) != ATTN_OK) {
        attn_cli_fail(ctx, cmd, st);
        return 0;
    }
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json",
                                        "chat_template.jinja", "generation_config.json",
                                        "special_tokens_map.json"};
    for (size_t i = 0; src_dir && i < sizeof files / sizeof *files; i++)
        if (!copy_if_there(cmd, ctx, src_dir, out, files[i])) return 0;
    return 1;
}

/* Every step: its loss on stdout (and the held-out loss when evaluated), the progress line on
 * stderr; a signal asks the run to stop with a checkpoint. */
static int on_step(void *user, const attn_train_progress *p) {
    attn_cli_curve *c = user;
    double val = p->evaluated ? (double)p->eval_loss : 0.0;
    attn_cli_dp_fault(p->step);
    printf("step %lld loss %.9g\n", (long long)p->step, (double)p->loss);
    if (val > 0)
        printf("held-out loss at step %lld: %.4f (perplexity %.3f)\n", (long long)p->step, val,
               exp(val));
    fflush(stdout);
    if (!attn_cli_curve_add(c, p, p->loss, val > 0, (float)val) || c->quiet)
        return attn_cli_stop_requested();
    char el[16], eta[16];
    attn_cli_fmt_time(p->elapsed_s, el, sizeof el);
    attn_cli_fmt_time(p->eta_s, eta, sizeof eta);
    fprintf(stderr,
            "%sstep %6lld/%lld  loss %.4f  lr %.2e  |g| %.3g  %6.0f tok/s  %s elapsed  ETA %s",
            c->tty ? "\r\033[K" : "", (long long)p->step, (long long)p->steps, (double)p->loss,
            (double)p->lr, (double)p->grad_norm, p->tokens_per_s, el, eta);
    if (val > 0) fprintf(stderr, "  held-out %.4f (ppl %.2f)\n", val, exp(val));
    else if (!c->tty) fputc('\n', stderr);
    fflush(stderr);
    return attn_cli_stop_requested();
}

int attn_cmd_lm_train(int argc, char **argv) {
    const char *init = NULL, *text_path = NULL, *out = "lm-finetuned";
    long long threads = 0, epochs = 0, stop_at = 0, steps = 0, batch = 4, len = 128, warmup = 10,
              seed = 1, eval_every = 50, eval_windows = 16;
    double lr = 1e-4, lr_min = -1, wd = 0.0, clip = 1.0, held_out = 0.1;
    attn_cli_train_common tc = {NULL, 1, 50, NULL};
    int resume = 0, quiet = 0, npos, dtype = ATTN_CLI_DTYPE_AUTO, no_mmap = 0;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("init", 0, &init, "MODEL",
                     "the model to start from: a GGUF file (dequantized to F32)\n"
                     "or a HF folder of Llama, Mistral, Qwen2/3 or Gemma 3 (required)"),
        ATTN_OPT_NO_MMAP(&no_mmap),
        ATTN_OPT_STR("text", 0, &text_path, "FILE", "the text to train on (required)"),
        ATTN_OPT_STR("out", 'o', &out, "DIR",
                     "where to write the checkpoint (state.safetensors) and the\n"
                     "model as a HF folder (default: lm-finetuned)"),
        ATTN_OPT_INT("steps", 0, &steps, 0, 100000000, "N",
                     "optimiser steps (default: 1 epoch, at most 100)"),
        ATTN_OPT_INT("epochs", 0, &epochs, 0, 1000000, "K",
                     "steps to see the training tokens K times (instead of --steps)"),
        ATTN_OPT_INT("batch", 0, &batch, 1, 65536, "B", "windows per step (default 4)"),
        ATTN_OPT_INT("len", 0, &len, 1, 1 << 20, "T", "tokens per window (default 128)"),
        ATTN_OPT_NUM("lr", 0, &lr, 1e-9, 10, "LR", "peak learning rate (default 1e-4)"),
        ATTN_OPT_NUM("min-lr", 0, &lr_min, 0, 10, "LR",
                     "the learning rate the cosine decay ends at (default lr/10)"),
        ATTN_OPT_INT("warmup", 0, &warmup, 0, 100000000, "N",
                     "linear warmup steps (default 10)"),
        ATTN_OPT_NUM("weight-decay", 0, &wd, 0, 10, "W", "AdamW weight decay (default 0)"),
        ATTN_OPT_NUM("clip", 0, &clip, 0, 1e9, "C",
                     "clip the gradient norm to C (default 1; 0: no clipping)"),
        ATTN_OPT_NUM("held-out", 0, &held_out, 0, 1, "FRACTION",
                     "the last FRACTION of the tokens is held out (default 0.1)"),
        ATTN_OPT_INT("eval-every", 0, &eval_every, 0, 100000000, "N",
                     "held-out loss every N steps (default 50; 0: start and end only)"),
        ATTN_OPT_INT("eval-windows", 0, &eval_windows, 0, 100000000, "N",
                     "held-out windows evaluated (default 16; 0: all)"),
        ATTN_OPT_TRAIN_COMMON(&tc, "checkpoint every N steps (default 50) and at the end"),
        ATTN_OPT_INT("stop-at", 0, &stop_at, 0, 100000000, "N",
                     "stop after step N with a checkpoint (continue with --resume)"),
        ATTN_OPT_FLAG("resume", 0, &resume, "continue from DIR/state.safetensors"),
        ATTN_OPT_INT("seed", 0, &seed, 0, 1LL << 62, "S",
                     "the windows' order follows from it (default 1)"),
        ATTN_OPT_CHOICE("dtype", 0, &dtype, ATTN_CLI_DTYPE_CHOICES, "T",
                        ATTN_CLI_DTYPE_HELP "; bf16 covers the\n"
                        "linear layers and attention, as torch.autocast; weights,\n"
                        "gradients and AdamW stay float"),
        ATTN_OPT_THREADS(&threads),
        ATTN_OPT_FLAG("quiet", 'q', &quiet, "no progress lines on stderr"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        CMD, "attn train lm --init MODEL --text FILE [options]",
        "Fine-tunes an LLM (SmolLM2, Gemma 3 270M, Qwen, Llama 3...) on a text file with its\n"
        "own tokenizer: random windows of T + 1 tokens from the training part, AdamW,\n"
        "warmup then cosine decay, gradient clipping; the held-out loss and perplexity at\n"
        "the start, every --eval-every steps and at the end.  DIR gets the checkpoint\n"
        "(state.safetensors: weights, optimiser, step), loss.svg and the model as a HF\n"
        "folder (config.json, model.safetensors, the source folder's tokenizer files) that\n"
        "'attn generate --model DIR' runs.  The same seed gives the same run for any\n"
        "thread count, and --resume continues it bit for bit.",
        opts, NULL,
        "attn train lm --init SmolLM2-135M-Instruct.Q4_1.gguf --text notes.txt --steps 20\n"
        "attn train lm --init smollm2-hf --text /usr/share/common-licenses/GPL-3 -o gpl\n"
        "attn train lm --init smollm2-hf --text notes.txt --dtype bf16 --steps 50\n"
        "attn train lm --init smollm2-hf --text /usr/share/common-licenses/GPL-3 -o gpl --resume"};
    int rc = attn_cli_parse(&spec, argc, argv, &npos);
    if (rc != ATTN_CLI_GO) return rc;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!init) return attn_cli_usage_error(&spec, "--init MODEL is required");
    if (!text_path) return attn_cli_usage_error(&spec, "--text FILE is required");
    if (!(held_out > 0 && held_out < 1))
        return attn_cli_usage_error(&spec, "--held-out must be between 0 and 1 (exclusive), got %g",
                                    held_out);
    if (steps && epochs) return attn_cli_usage_error(&spec, "give --steps or --epochs, not both");
    if (lr_min < 0) lr_min = lr / 10;
    attn_lm_train_config r = attn_lm_train_defaults();
    r.batch = batch, r.len = len, r.steps = steps, r.warmup = warmup, r.seed = (uint64_t)seed;
    r.lr = (float)lr, r.lr_min = (float)lr_min, r.weight_decay = (float)wd, r.clip = (float)clip;
    r.held_out = held_out, r.eval_every = eval_every, r.eval_windows = eval_windows;
    r.stop_at = stop_at, r.save_every = tc.save_every, r.accum = (int)tc.accum;
    const int rank0 = attn_cli_dp_rank() == 0;
    if (!rank0) quiet = 1; /* rank 0 alone prints progress and writes files */

    attn_cli_paths paths;
    char state_path[4200];
    struct stat sb;
    snprintf(state_path, sizeof state_path, "%s/state.safetensors", out);
    if (resume && stat(state_path, &sb) != 0) { /* before the folder is made */
        fprintf(stderr, "attn %s: --resume: no checkpoint %s (%s)\n", CMD, state_path,
                strerror(errno));
        return 1;
    }
    if (attn_cli_train_dir(CMD, out, &paths)) return 1;
    snprintf(state_path, sizeof state_path, "%s", paths.state);
    int from_dir = stat(init, &sb) == 0 && S_ISDIR(sb.st_mode);
    char init_abs[PATH_MAX];
    if (!realpath(init, init_abs)) snprintf(init_abs, sizeof init_abs, "%s", init);
    r.init = init_abs;
    r.state_path = rank0 ? state_path : NULL;
    r.log_path = rank0 ? attn_cli_train_log(&tc, &paths) : NULL;
    r.tb_dir = rank0 ? attn_cli_train_tb(&tc) : NULL;

    attn_ctx *ctx = NULL;
    attn_llm *llm = NULL;
    attn_module *m = NULL;
    attn_st *rs = NULL;
    char *text = NULL;
    int32_t *tok = NULL;
    attn_cli_curve c = {0};
    int curve = 0;
    attn_status st;
    rc = 1;
    const int dtype_asked = dtype;
    if (attn_cli_ctx_dtype(CMD, threads, quiet, &dtype, &ctx)) return 1;
    /* under mpirun: each rank takes batch/N of each step's windows (cli/train_dp.c) */
    if (attn_cli_dp_open(CMD, ctx, r.batch, "batch", &r.dp)) goto out;
    size_t tlen;
    if (!attn_cli_read_text(CMD, ctx, text_path, &text, &tlen)) goto out;
    if ((st = attn_llm_load(ctx, init, no_mmap ? ATTN_LLM_LOAD_NO_MMAP : 0u, &llm)) != ATTN_OK) {
        attn_cli_fail(ctx, CMD, st);
        goto out;
    }
    const attn_bpe *bpe = attn_llm_tokenizer(llm);
    if (!bpe) {
        fprintf(stderr, "attn %s: %s has no tokenizer (tokenizer.json, or tokenizer.ggml.* keys)\n",
                CMD, init);
        goto out;
    }
    attn_llm_config cfg;
    attn_llm_special sp;
    attn_llm_get_info(llm, &cfg);
    attn_llm_get_special(llm, &sp);
    if (r.len > cfg.max_position_embeddings) {
        fprintf(stderr, "attn %s: --len %lld is over the model's context (%lld)\n", CMD,
                (long long)r.len, (long long)cfg.max_position_embeddings);
        goto out;
    }
    /* the tokens: bos first when the model asks for it */
    int64_t ntok = 0, lead = sp.add_bos && sp.bos >= 0;
    if ((st = attn_bpe_encode(ctx, bpe, text, tlen, 0, NULL, 0, &ntok)) != ATTN_OK) {
        attn_cli_fail(ctx, CMD, st);
        goto out;
    }
    if (!(tok = malloc(sizeof *tok * (size_t)(ntok + lead + 1)))) {
        fprintf(stderr, "attn %s: out of memory\n", CMD);
        goto out;
    }
    if (lead) tok[0] = sp.bos;
    if ((st = attn_bpe_encode(ctx, bpe, text, tlen, 0, tok + lead, ntok, &ntok)) != ATTN_OK) {
        attn_cli_fail(ctx, CMD, st);
        goto out;
    }
    ntok += lead;
    const long long T = r.len, B = r.batch;
    int64_t ntrain = 0;
    if (attn_lm_train_split(ctx, &r, ntok, &ntrain) != ATTN_OK) {
        int64_t nv = (int64_t)floor((double)ntok * r.held_out);
        fprintf(stderr, "attn %s: %s is %lld tokens: too short for --len %lld with --held-out %g "
                        "(the training part (%lld tokens) and the held-out part (%lld) must each "
                        "hold one window of %lld tokens)\n", CMD, text_path, (long long)ntok,
                T, r.held_out, (long long)(ntok - nv), (long long)nv, T + 1);
        goto out;
    }
    int64_t nval = ntok - ntrain;
    if (!r.steps) {
        double k = epochs ? (double)epochs : 1.0;
        r.steps = (long long)ceil(k * (double)ntrain / (double)(B * T));
        if (!epochs && r.steps > 100) r.steps = 100;
        if (r.steps < 1) r.steps = 1;
    }
    attn_train_setting set[MAX_SETTINGS];
    int nset = settings(&r, fnv1a_ids(tok, ntok), ntok, nval, dtype, set);

    /* the loaded model becomes the trained one (F32 master weights, its text side kept) */
    if ((st = attn_llm_make_trainable(ctx, llm, ATTN_LLM_DEQUANTIZE)) != ATTN_OK) {
        attn_cli_fail(ctx, CMD, st);
        goto out;
    }
    m = attn_llm_module(llm);
    long long step0 = 0;
    if (resume) {
        const char *s0;
        if ((st = attn_st_read_file(ctx, state_path, &rs)) != ATTN_OK) {
            attn_cli_fail(ctx, CMD, st);
            goto out;
        }
        if (!attn_st_meta(rs, "task") || strcmp(attn_st_meta(rs, "task"), "lm") != 0) {
            fprintf(stderr, "attn %s: %s is not a checkpoint of attn train lm\n", CMD, state_path);
            goto out;
        }
        if (attn_cli_dtype_resume(ctx, rs, dtype_asked, &dtype))
            nset = settings(&r, fnv1a_ids(tok, ntok), ntok, nval, dtype, set);
        if (!(s0 = attn_st_meta(rs, "train_step")) ||
            !attn_cli_parse_i64(s0, 0, r.steps, &step0)) {
            fprintf(stderr, "attn %s: %s: bad train_step\n", CMD, state_path);
            goto out;
        }
        /* the weights the run continues from, for the first held-out loss and the ranks'
         * agreement (attn_lm_train loads them again, with the optimiser) */
        if ((st = attn_module_load(ctx, m, rs, "model.", 1)) != ATTN_OK) {
            attn_cli_fail(ctx, CMD, st);
            goto out;
        }
    }
    r.settings = set, r.nsettings = nset;
    if (attn_cli_curve_init(&c, CMD, r.steps)) goto out;
    curve = 1;
    c.quiet = quiet;
    /* data parallel: the ranks agree on every setting that changes the result and on the
     * initial weights (cli/train_dp.c), before the first step */
    for (int i = 0; i < nset; i++) attn_cli_dp_note(set[i].option, "%s", set[i].value);
    attn_cli_dp_note("--eval-every", "%lld", (long long)r.eval_every);
    attn_cli_dp_note("--eval-windows", "%lld", (long long)r.eval_windows);
    attn_cli_dp_note("--stop-at", "%lld", stop_at);
    attn_cli_dp_note("--accum", "%lld", tc.accum);
    attn_cli_dp_note("--resume (the step it starts from)", "%lld", step0);
    attn_cli_dp_note_params("the initial weights (--init, --resume)", m);
    if (attn_cli_dp_ready(CMD, 1)) goto out;
    if (!quiet)
        fprintf(stderr, "fine-tuning %s: %lld parameters (F32), %lld layers; text %lld tokens "
                        "(%lld training, %lld held out); batch %lld x %lld tokens, steps %lld "
                        "(from %lld), lr %g, %d threads%s\n",
                init, (long long)attn_module_numel(m), (long long)cfg.num_layers,
                (long long)ntok, (long long)ntrain, (long long)nval, B, T, (long long)r.steps,
                step0, lr, attn_ctx_threads(ctx),
                dtype == ATTN_CLI_DTYPE_BF16 ? ", mixed precision (bf16 products)" : "");
    double val0 = 0;
    if ((st = attn_lm_evaluate(ctx, llm, &r, tok, ntok, &val0)) != ATTN_OK) {
        attn_cli_fail(ctx, CMD, st);
        goto out;
    }
    printf("held-out loss at step %lld: %.4f (perplexity %.3f)\n", step0, val0, exp(val0));
    fflush(stdout);
    attn_train_result res;
    attn_cli_stop_on_signals();
    st = attn_lm_train(ctx, llm, tok, ntok, &r, rs, on_step, &c, &res);
    if (c.tty && !quiet) fputc('\n', stderr);
    if (st != ATTN_OK) {
        attn_cli_dp_fail(ctx, CMD, st);
        goto out;
    }
    attn_st_free(rs), rs = NULL;
    if (res.step < r.steps) {
        printf("stopped at step %lld of %lld%s: continue with --resume\ncheckpoint: %s\n",
               (long long)res.step, (long long)r.steps,
               res.end == ATTN_TRAIN_STOPPED ? " (a signal)" : "", state_path);
        rc = 0;
        goto out;
    }
    double val = c.nv ? (double)c.val[c.nv - 1] : val0;
    /* the model as a HF folder (rank 0 writes it) */
    if (rank0) {
        if (!write_hf(CMD, ctx, llm, !from_dir, &sp, from_dir ? init : NULL, out)) goto out;
        /* a resumed run that had already finished trains nothing here: no curve to draw */
        if (c.n && (st = attn_cli_loss_curve_svg(ctx, paths.svg, c.step, c.train, c.n, c.vstep,
                                                 c.val, c.nv, "held-out loss",
                                                 "attn train lm: training and held-out loss")) !=
                       ATTN_OK) {
            attn_cli_fail(ctx, CMD, st);
            goto out;
        }
        printf("held-out loss: %.4f -> %.4f (perplexity %.3f -> %.3f)\n", val0, val, exp(val0),
               exp(val));
        attn_llm_config fc;
        attn_llm_get_info(llm, &fc);
        const int llama = gguf_writable(&fc);
        printf("model: %s (HF folder%s)\ncheckpoint: %s\nloss curve: %s\n", out,
               from_dir  ? ""
               : llama   ? "; no tokenizer.json: the source was a GGUF file: 'attn export "
                           "--model DIR --gguf FILE' writes it with its tokenizer"
                         : "; no tokenizer.json: the source was a GGUF file; transformers loads "
                           "the weights, with the tokenizer of the model's HF release",
               state_path, c.n ? paths.svg : "(none: the run had already finished)");
    }
    rc = 0;
out:
    if (curve) attn_cli_curve_free(&c);
    attn_st_free(rs);
    attn_llm_free(llm); /* and its module m */
    free(tok);
    free(text);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn export: a llama model to GGUF (F32 or Q8_0) or to a HF folder ---------------- */
static const int gsz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}; /* scalar sizes by type */

/* The bytes of one GGUF metadata entry (key, type, value) as it is in the file. */
static uint64_t kv_bytes(const attn_gguf *g, const attn_gguf_kv *kv) {
    uint64_t n = 8 + strlen(kv->key) + 4;
    if (kv->type == ATTN_GGUF_STRING) return n + 8 + kv->n;
    if (kv->type != ATTN_GGUF_ARRAY) return n + (uint64_t)gsz[kv->type];
    n += 4 + 8;
    if (kv->elem_type != ATTN_GGUF_STRING) return n + kv->n * (uint64_t)gsz[kv->elem_type];
    for (uint64_t i = 0; i < kv->n; i++) {
        const char *s;
        size_t l = 0;
        attn_gguf_arr_str(g, kv->key, i, &s, &l);
        n += 8 + l;
    }
    return n;
}

typedef struct gw { /* a GGUF file being written (attn_file_out: whole or not at all) */
    attn_file_out *f;
    int ok;
    uint64_t pos; /* bytes written so far */
} gw;
static void g_put(gw *w, const void *p, size_t n) {
    if (w->ok && n && attn_file_out_write(w->f, p, n) != ATTN_OK) w->ok = 0;
    w->pos += n;
}
static void g_u32(gw *w, uint32_t v) { g_put(w, &v, 4); }
static void g_u64(gw *w, uint64_t v) { g_put(w, &v, 8); }
static void g_str(gw *w, const char *s) {
    g_u64(w, strlen(s));
    g_put(w, s, strlen(s));
}
static void g_kv_u32(gw *w, const char *k, uint32_t v) {
    g_str(w, k), g_u32(w, ATTN_GGUF_UINT32), g_u32(w, v);
}
static void g_kv_f32(gw *w, const char *k, float v) {
    g_str(w, k), g_u32(w, ATTN_GGUF_FLOAT32), g_put(w, &v, 4);
}
static void g_kv_str(gw *w, const char *k, const char *v) {
    g_str(w, k), g_u32(w, ATTN_GGUF_STRING), g_str(w, v);
}

/* The tokenizer.* keys of llm's tokenizer (from a tokenizer.json) as llama.cpp's converter
 * writes them for a byte-level BPE: model gpt2, pre, tokens, token types, merges ("a b"), the
 * special ids, add_bos and the chat template.  Writes them when w is not NULL; returns their
 * count, or -1 when out of memory. */
static int tok_keys(gw *w, const attn_llm *llm) {
    const attn_bpe *b = attn_llm_tokenizer(llm);
    attn_bpe_info info;
    attn_llm_special sp;
    const char *tmpl = attn_llm_chat_template(llm);
    attn_bpe_get_info(b, &info);
    attn_llm_get_special(llm, &sp);
    int n = 6 + (sp.bos >= 0) + (sp.eos >= 0) + (info.unk_id >= 0) + (tmpl != NULL);
    if (!w) return n;
    int32_t *pairs = malloc(sizeof *pairs * (size_t)(2 * info.n_merges + 2));
    if (!pairs || attn_bpe_merges(b, pairs, info.n_merges) != ATTN_OK) {
        free(pairs);
        return -1;
    }
    uint64_t nm = 0;
    for (int64_t r = 0; r < info.n_merges; r++) nm += pairs[2 * r] >= 0;
    g_kv_str(w, "tokenizer.ggml.model", "gpt2");
    g_kv_str(w, "tokenizer.ggml.pre", info.pre);
    g_str(w, "tokenizer.ggml.tokens"), g_u32(w, ATTN_GGUF_ARRAY), g_u32(w, ATTN_GGUF_STRING);
    g_u64(w, (uint64_t)info.vocab_size);
    for (int64_t i = 0; i < info.vocab_size; i++) g_str(w, attn_bpe_token_text(b, (int32_t)i));
    g_str(w, "tokenizer.ggml.token_type"), g_u32(w, ATTN_GGUF_ARRAY), g_u32(w, ATTN_GGUF_INT32);
    g_u64(w, (uint64_t)info.vocab_size);
    for (int64_t i = 0; i < info.vocab_size; i++)
        g_u32(w, (uint32_t)attn_bpe_token_type(b, (int32_t)i));
    g_str(w, "tokenizer.ggml.merges"), g_u32(w, ATTN_GGUF_ARRAY), g_u32(w, ATTN_GGUF_STRING);
    g_u64(w, nm);
    for (int64_t r = 0; r < info.n_merges; r++) {
        if (pairs[2 * r] < 0) continue;
        const char *x = attn_bpe_token_text(b, pairs[2 * r]);
        const char *y = attn_bpe_token_text(b, pairs[2 * r + 1]);
        g_u64(w, strlen(x) + 1 + strlen(y));
        g_put(w, x, strlen(x)), g_put(w, " ", 1), g_put(w, y, strlen(y));
    }
    free(pairs);
    if (sp.bos >= 0) g_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)sp.bos);
    if (sp.eos >= 0) g_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)sp.eos);
    if (info.unk_id >= 0) g_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)info.unk_id);
    {
        unsigned char t = sp.add_bos ? 1 : 0;
        g_str(w, "tokenizer.ggml.add_bos_token"), g_u32(w, ATTN_GGUF_BOOL), g_put(w, &t, 1);
    }
    if (tmpl) g_kv_str(w, "tokenizer.chat_template", tmpl);
    return n;
}

/* HF parameter name -> GGUF tensor name; 0 when it has none. */
static int gguf_name(const char *hf, char *out, size_t n) {
    static const char *const map[][2] = {
        {"self_attn.q_proj.", "attn_q."}, {"self_attn.k_proj.", "attn_k."},
        {"self_attn.v_proj.", "attn_v."}, {"self_attn.o_proj.", "attn_output."},
        {"mlp.gate_proj.", "ffn_gate."}, {"mlp.up_proj.", "ffn_up."},
        {"mlp.down_proj.", "ffn_down."}, {"input_layernorm.", "attn_norm."},
        {"post_attention_layernorm.", "ffn_norm."}};
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(out, n, "token_embd.weight") > 0;
    if (!strcmp(hf, "model.norm.weight")) return snprintf(out, n, "output_norm.weight") > 0;
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, n, "output.weight") > 0;
    int layer, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) != 1 || !used) return 0;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        size_t l = strlen(map[i][0]);
        if (!strncmp(hf + used, map[i][0], l))
            return snprintf(out, n, "blk.%d.%s%s", layer, map[i][1], hf + used + l) > 0;
    }
    return 0;
}

/* Writes the trainable model llm as a GGUF file of general.architecture llama: F32, or Q8_0 for the matrices
 * (type 8; norms and biases stay F32), with the tokenizer.* keys of tok (a GGUF file) copied
 * as they are.  interleaved: q/k rows already in GGUF's order (a GGUF source); else they are
 * permuted as llama.cpp's converter does (HF row j D/2 + i -> row 2i + j within each head). */
static attn_status write_gguf(attn_ctx *ctx, attn_llm *llm, int interleaved,
                              const attn_gguf *tok, const char *tok_path, int q8,
                              const char *path) {
    attn_llm_config c;
    const attn_module *m = attn_llm_module(llm);
    attn_status st = attn_llm_get_info(llm, &c);
    if (st != ATTN_OK) return st;
    const uint64_t align = 32;
    size_t np = attn_module_param_count(m);
    /* the tensors: names, types, sizes and offsets first */
    char (*names)[96] = calloc(np, sizeof *names);
    int *types = calloc(np, sizeof *types);
    uint64_t *offs = calloc(np, sizeof *offs), off = 0;
    size_t nt = 0;
    void *buf = NULL;
    float *perm = NULL;
    gw w = {NULL, 1, 0};
    if (!names || !types || !offs) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    for (size_t i = 0; i < np; i++) {
        const char *name;
        attn_tensor v;
        attn_module_param_at(m, i, &name, &v);
        if (!gguf_name(name, names[i], sizeof names[i])) {
            names[i][0] = '\0';
            continue;
        }
        types[i] = q8 && v.ndim == 2 && v.shape[1] % 32 == 0 ? 8 : 0;
        int64_t be = 1, bb = 4;
        if (types[i]) attn_qtype_block(types[i], &be, &bb);
        offs[i] = off;
        off += ((uint64_t)(attn_tensor_numel(&v) / be * bb) + align - 1) / align * align;
        nt++;
    }
    uint64_t nkv = 0;
    size_t ntk = tok ? attn_gguf_kv_count(tok) : 0;
    if (!tok) nkv += (uint64_t)tok_keys(NULL, llm);
    for (size_t i = 0; i < ntk; i++) {
        attn_gguf_kv kv;
        attn_gguf_kv_at(tok, i, &kv);
        if (!strncmp(kv.key, "tokenizer.", 10)) nkv++;
    }
    int kd = c.head_dim * c.num_heads != c.hidden_size;
    nkv += 12 + (kd ? 2 : 0);
    if ((st = attn_file_out_open(ctx, path, &w.f)) != ATTN_OK) goto done;
    g_put(&w, "GGUF", 4), g_u32(&w, 3), g_u64(&w, nt), g_u64(&w, nkv);
    g_kv_str(&w, "general.architecture", "llama");
    g_kv_str(&w, "general.name", "attn export");
    g_kv_u32(&w, "general.file_type", q8 ? 7u : 0u);
    g_kv_u32(&w, "llama.context_length", (uint32_t)c.max_position_embeddings);
    g_kv_u32(&w, "llama.embedding_length", (uint32_t)c.hidden_size);
    g_kv_u32(&w, "llama.block_count", (uint32_t)c.num_layers);
    g_kv_u32(&w, "llama.feed_forward_length", (uint32_t)c.intermediate_size);
    g_kv_u32(&w, "llama.attention.head_count", (uint32_t)c.num_heads);
    g_kv_u32(&w, "llama.attention.head_count_kv", (uint32_t)c.num_kv_heads);
    g_kv_f32(&w, "llama.rope.freq_base", (float)c.rope_theta);
    g_kv_f32(&w, "llama.attention.layer_norm_rms_epsilon", (float)c.rms_norm_eps);
    g_kv_u32(&w, "llama.vocab_size", (uint32_t)c.vocab_size);
    if (kd) {
        g_kv_u32(&w, "llama.attention.key_length", (uint32_t)c.head_dim);
        g_kv_u32(&w, "llama.attention.value_length", (uint32_t)c.head_dim);
    }
    /* the tokenizer keys, byte for byte from the source file, or from llm's tokenizer */
    if (!tok && tok_keys(&w, llm) < 0) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    FILE *src = tok ? fopen(tok_path, "rb") : NULL;
    if (tok && !src) {
        st = ATTN_E_IO;
        goto done;
    }
    for (size_t i = 0; i < ntk && w.ok; i++) {
        attn_gguf_kv kv;
        attn_gguf_kv_at(tok, i, &kv);
        if (strncmp(kv.key, "tokenizer.", 10) != 0) continue;
        uint64_t n = kv_bytes(tok, &kv);
        char chunk[65536];
        if (fseek(src, (long)kv.offset, SEEK_SET) != 0) w.ok = 0;
        while (w.ok && n) {
            size_t k = n < sizeof chunk ? (size_t)n : sizeof chunk;
            if (fread(chunk, 1, k, src) != k) w.ok = 0;
            g_put(&w, chunk, k);
            n -= k;
        }
    }
    if (src) fclose(src);
    for (size_t i = 0; i < np; i++) {
        if (!names[i][0]) continue;
        const char *name;
        attn_tensor v;
        attn_module_param_at(m, i, &name, &v);
        g_str(&w, names[i]);
        g_u32(&w, (uint32_t)v.ndim);
        for (int d = v.ndim - 1; d >= 0; d--) g_u64(&w, (uint64_t)v.shape[d]);
        g_u32(&w, (uint32_t)types[i]);
        g_u64(&w, offs[i]);
    }
    {
        static const char zero[64];
        g_put(&w, zero, (size_t)((align - w.pos % align) % align));
    }
    uint64_t at = 0;
    for (size_t i = 0; i < np && w.ok; i++) {
        if (!names[i][0]) continue;
        const char *name;
        attn_tensor v;
        attn_module_param_at(m, i, &name, &v);
        int64_t n = attn_tensor_numel(&v);
        const float *data = v.data;
        int qk = strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj.");
        if (qk && !interleaved) { /* HF rows -> GGUF's interleaved rows */
            int64_t heads = strstr(name, "q_proj") ? c.num_heads : c.num_kv_heads, D = c.head_dim;
            int64_t cols = v.ndim == 2 ? v.shape[1] : 1;
            float *p = realloc(perm, sizeof *perm * (size_t)n);
            if (!p) {
                st = ATTN_E_NOMEM;
                goto done;
            }
            perm = p;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t ii = 0; ii < D / 2; ii++)
                    for (int64_t j = 0; j < 2; j++)
                        memcpy(perm + (h * D + 2 * ii + j) * cols,
                               data + (h * D + j * (D / 2) + ii) * cols,
                               sizeof *perm * (size_t)cols);
            data = perm;
        }
        static const char zero[64];
        g_put(&w, zero, (size_t)(offs[i] - at));
        at = offs[i];
        if (types[i]) {
            int64_t be, bb;
            attn_qtype_block(types[i], &be, &bb);
            size_t nb = (size_t)(n / be * bb);
            void *q = realloc(buf, nb);
            if (!q) {
                st = ATTN_E_NOMEM;
                goto done;
            }
            buf = q;
            if ((st = attn_quantize(ctx, types[i], data, n, buf, nb)) != ATTN_OK) goto done;
            g_put(&w, buf, nb);
            at += nb;
        } else {
            g_put(&w, data, sizeof *data * (size_t)n);
            at += sizeof *data * (uint64_t)n;
        }
    }
    st = w.ok ? ATTN_OK : ATTN_E_IO; /* a failed write left its message in ctx */
done:
    if (w.f && st == ATTN_OK) st = attn_file_out_commit(w.f);
    else attn_file_out_abort(w.f);
    free(names), free(types), free(offs), free(buf), free(perm);
    return st;
}

int attn_cmd_export(int argc, char **argv) {
    const char *model = NULL, *gguf = NULL, *hf = NULL, *tok_path = NULL;
    int type = 0, npos, no_mmap = 0;
    long long threads = 0;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("model", 0, &model, "MODEL",
                     "a llama model: a GGUF file, a HF folder (e.g. the output of\n"
                     "'attn train lm') or a checkpoint of 'attn train lm'\n"
                     "(DIR/state.safetensors, read with the model it started from)\n"
                     "(required)"),
        ATTN_OPT_NO_MMAP(&no_mmap),
        ATTN_OPT_STR("gguf", 0, &gguf, "FILE", "write it as a GGUF file"),
        ATTN_OPT_CHOICE("type", 0, &type, "f32|q8_0", "TYPE",
                        "the GGUF's matrices: f32 (default) or q8_0 (norms stay F32)"),
        ATTN_OPT_STR("tokenizer", 0, &tok_path, "FILE",
                     "the GGUF whose tokenizer.* keys the GGUF gets (default: MODEL\n"
                     "when it is a GGUF, or the GGUF that 'attn train lm' started\n"
                     "from; else required)"),
        ATTN_OPT_STR("hf", 0, &hf, "DIR",
                     "write it as a HF folder: config.json, model.safetensors (F32)\n"
                     "and the folder's tokenizer files"),
        ATTN_OPT_THREADS(&threads), ATTN_OPT_END};
    const attn_cli_spec spec = {
        "export", "attn export --model MODEL --gguf FILE [--type f32|q8_0] [--tokenizer FILE]\n"
                  "attn export --model MODEL --hf DIR",
        "Writes a llama model (GGUF or HF folder) as a GGUF file that llama.cpp, the gguf\n"
        "Python package, transformers and attn read (the llama.* keys, the source's\n"
        "tokenizer.* keys byte for byte, q/k rows in the converter's interleaved order), or\n"
        "as a HF folder (q/k rows in HF's order).  'attn generate --model' runs both.",
        opts, NULL,
        "attn export --model lm-finetuned --gguf ft.gguf --type q8_0\n"
        "attn export --model lm-finetuned/state.safetensors --hf ft-step50\n"
        "attn export --model SmolLM2-135M-Instruct.Q4_1.gguf --hf smollm2-f32"};
    int rc = attn_cli_parse(&spec, argc, argv, &npos);
    if (rc != ATTN_CLI_GO) return rc;
    if (npos) return attn_cli_usage_error(&spec, "unexpected argument '%s'", argv[1]);
    if (!model) return attn_cli_usage_error(&spec, "--model MODEL is required");
    if (!gguf == !hf) return attn_cli_usage_error(&spec, "give one of --gguf FILE and --hf DIR");
    struct stat sb;
    attn_ctx *ctx;
    if (attn_cli_ctx("export", threads, 0, &ctx)) return 1;
    attn_llm *llm = NULL;
    attn_gguf *tok = NULL;
    attn_st *ck = NULL; /* a checkpoint of attn train lm, or the one beside a train lm folder */
    attn_llm_special sp;
    attn_status st = ATTN_OK;
    const char *src = model, *init = NULL;
    char ck_path[4200];
    rc = 1;
    int is_dir = stat(model, &sb) == 0 && S_ISDIR(sb.st_mode);
    int is_ckpt = !is_dir && S_ISREG(sb.st_mode) && !attn_cli_is_gguf(model);
    snprintf(ck_path, sizeof ck_path, is_dir ? "%s/state.safetensors" : "%s", model);
    if ((is_ckpt || (is_dir && stat(ck_path, &sb) == 0)) &&
        (st = attn_st_read_file(ctx, ck_path, &ck)) != ATTN_OK) {
        attn_cli_fail(ctx, "export", st);
        goto out;
    }
    if (ck) {
        const char *task = attn_st_meta(ck, "task");
        init = attn_st_meta(ck, "init");
        if (!task || strcmp(task, "lm") != 0 || !init) init = NULL;
        if (is_ckpt && !init) {
            fprintf(stderr, "attn export: %s is not a checkpoint of attn train lm%s\n", ck_path,
                    task && !strcmp(task, "lm") ? " (no metadata \"init\")" : "");
            goto out;
        }
        if (is_ckpt) src = init; /* its config and tokenizer; the weights come from ck */
    }
    int src_dir = stat(src, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (gguf && !tok_path) {
        struct stat ib;
        if (!src_dir) tok_path = src;
        else if (init && stat(init, &ib) == 0 && !S_ISDIR(ib.st_mode)) tok_path = init;
        /* else the folder's tokenizer.json, converted */
    }
    st = attn_llm_load(ctx, src, no_mmap ? ATTN_LLM_LOAD_NO_MMAP : 0u, &llm);
    if (st == ATTN_OK) st = attn_llm_make_trainable(ctx, llm, ATTN_LLM_DEQUANTIZE);
    if (st == ATTN_OK && is_ckpt)
        st = attn_module_load(ctx, attn_llm_module(llm), ck, "model.", 1);
    if (st == ATTN_OK) st = attn_llm_get_special(llm, &sp);
    if (st == ATTN_OK && gguf && tok_path)
        st = no_mmap ? attn_gguf_read(ctx, tok_path, &tok) : attn_gguf_open(ctx, tok_path, &tok);
    if (st != ATTN_OK) {
        attn_cli_fail(ctx, "export", st);
        goto out;
    }
    const int from_dir = src_dir;
    if (gguf) {
        attn_gguf_kv kv;
        if (tok && attn_gguf_kv_find(tok, "tokenizer.ggml.model", &kv) != ATTN_OK) {
            fprintf(stderr, "attn export: %s has no tokenizer.ggml.* keys\n", tok_path);
            goto out;
        }
        if (tok) { /* the keys are copied as they are: they must make a tokenizer */
            attn_bpe *check = NULL;
            st = attn_bpe_from_gguf(ctx, tok, &check);
            attn_bpe_free(check);
            if (st != ATTN_OK) {
                fprintf(stderr, "attn export: the tokenizer of %s: ", tok_path);
                attn_cli_put_escaped(stderr, attn_ctx_errmsg(ctx));
                fprintf(stderr, " (%s)\n", attn_status_name(st));
                goto out;
            }
        }
        if (!tok && !attn_llm_tokenizer(llm)) {
            fprintf(stderr, "attn export: %s has no tokenizer (tokenizer.json): give "
                            "--tokenizer FILE.gguf for the tokenizer.* keys\n", src);
            goto out;
        }
        attn_bpe_info ti;
        if (!tok && attn_bpe_get_info(attn_llm_tokenizer(llm), &ti) == ATTN_OK &&
            ti.kind != ATTN_BPE_KIND_BYTE_LEVEL) { /* the keys written are byte-level BPE's */
            fprintf(stderr, "attn export: %s's tokenizer.json is %s, not byte-level BPE: give "
                            "--tokenizer FILE.gguf for the tokenizer.* keys\n", src, ti.pre);
            goto out;
        }
        attn_llm_config fc;
        attn_llm_get_info(llm, &fc);
        if (!gguf_writable(&fc)) {
            fprintf(stderr,
                    "attn export: --gguf writes Llama models (GGUF architecture llama); "
                    "this one is %s%s: write it with --hf DIR\n",
                    family(&fc), fc.rope_scaling ? " with RoPE scaling" : "");
            goto out;
        }
        errno = 0;
        if ((st = write_gguf(ctx, llm, !from_dir, tok, tok_path, type == 1, gguf)) != ATTN_OK) {
            attn_cli_fail(ctx, "export", st); /* the writer's message names path and reason */
            goto out;
        }
        printf("wrote %s (%s)\n", gguf, type == 1 ? "Q8_0" : "F32");
    } else {
        if (!write_hf("export", ctx, llm, !from_dir, &sp, from_dir ? src : NULL, hf)) goto out;
        printf("wrote %s (HF folder%s)\n", hf,
               from_dir ? "" : "; no tokenizer.json: the source is a GGUF file");
    }
    rc = 0;
out:
    attn_st_free(ck);
    attn_gguf_free(tok);
    attn_llm_free(llm);
    attn_ctx_free(ctx);
    return rc;
}
