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

#include "commands.h"
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

/* The trainable model llm as a HF folder out (attn_llm_save_hf), with src_dir's tokenizer
 * files when src_dir is not NULL.  0 on failure (printed). */
static int write_hf(const char *cmd, attn_ctx *ctx, attn_llm *llm, const char *src_dir,
                    const char *out) {
    attn_status st = attn_llm_save_hf(ctx, llm, src_dir, out);
    if (st != ATTN_OK) attn_cli_fail(ctx, cmd, st);
    return st == ATTN_OK;
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
    if (!attn_cli_curve_add(c, p, val > 0, (float)val) || c->quiet)
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
    int resume = 0, quiet = 0, npos, dtype = ATTN_CLI_DTYPE_AUTO, mmap = 0;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("init", 0, &init, "MODEL",
                     "the model to start from: a GGUF file (dequantized to F32)\n"
                     "or a HF folder of Llama, Mistral, Qwen2/3 or Gemma 3 (required)"),
        ATTN_OPT_MMAP(&mmap),
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
    attn_cli_curve c;
    attn_cli_curve_init(&c, quiet);
    attn_status st;
    rc = 1;
    const int dtype_asked = dtype;
    if (attn_cli_ctx_dtype(CMD, threads, quiet, &dtype, &ctx)) return 1;
    /* under mpirun: each rank takes batch/N of each step's windows (common/train_dp.c) */
    if (attn_cli_dp_open(CMD, ctx, r.batch, "batch", &r.dp)) goto out;
    size_t tlen;
    if (!attn_cli_read_text(CMD, ctx, text_path, &text, &tlen)) goto out;
    if ((st = attn_llm_load(ctx, init, ATTN_CLI_MMAP_FLAGS(mmap), &llm)) != ATTN_OK) {
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
    /* data parallel: the ranks agree on every setting that changes the result and on the
     * initial weights (common/train_dp.c), before the first step */
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
    double val = c.nv ? (double)c.val : val0;
    /* the model as a HF folder (rank 0 writes it) */
    if (rank0) {
        if (!write_hf(CMD, ctx, llm, from_dir ? init : NULL, out)) goto out;
        const int chart = attn_cli_train_chart(CMD, r.log_path, paths.svg);
        if (chart > 0) goto out;
        printf("held-out loss: %.4f -> %.4f (perplexity %.3f -> %.3f)\n", val0, val, exp(val0),
               exp(val));
        const int llama = attn_llm_gguf_writable(llm);
        printf("model: %s (HF folder%s)\ncheckpoint: %s\nloss curve: %s\n", out,
               from_dir  ? ""
               : llama   ? "; no tokenizer.json: the source was a GGUF file: 'attn export "
                           "--model DIR --gguf FILE' writes it with its tokenizer"
                         : "; no tokenizer.json: the source was a GGUF file; transformers loads "
                           "the weights, with the tokenizer of the model's HF release",
               state_path, chart == 0 ? paths.svg : "(none: no log)");
    }
    rc = 0;
out:
    attn_st_free(rs);
    attn_llm_free(llm); /* and its module m */
    free(tok);
    free(text);
    attn_ctx_free(ctx);
    return rc;
}

/* ---- attn export: a llama model to GGUF (F32 or Q8_0) or to a HF folder ---------------- */
int attn_cmd_export(int argc, char **argv) {
    const char *model = NULL, *gguf = NULL, *hf = NULL, *tok_path = NULL;
    int type = 0, npos, mmap = 0;
    long long threads = 0;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("model", 0, &model, "MODEL",
                     "a llama model: a GGUF file, a HF folder (e.g. the output of\n"
                     "'attn train lm') or a checkpoint of 'attn train lm'\n"
                     "(DIR/state.safetensors, read with the model it started from)\n"
                     "(required)"),
        ATTN_OPT_MMAP(&mmap),
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
    st = attn_llm_load(ctx, src, ATTN_CLI_MMAP_FLAGS(mmap), &llm);
    if (st == ATTN_OK) st = attn_llm_make_trainable(ctx, llm, ATTN_LLM_DEQUANTIZE);
    if (st == ATTN_OK && is_ckpt)
        st = attn_module_load(ctx, attn_llm_module(llm), ck, "model.", 1);
    if (st == ATTN_OK) st = attn_llm_get_special(llm, &sp);
    if (st == ATTN_OK && gguf && tok_path)
        /* only its text side is read: mapped unless --no-mmap */
        st = mmap == 2 ? attn_gguf_read(ctx, tok_path, &tok) : attn_gguf_open(ctx, tok_path, &tok);
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
        if (!attn_llm_gguf_writable(llm)) {
            attn_llm_config fc;
            const char *fam = "llama", *arch;
            attn_llm_get_info(llm, &fc);
            attn_llm_family(&fc, &fam, &arch);
            fprintf(stderr,
                    "attn export: --gguf writes Llama models (GGUF architecture llama); "
                    "this one is %s%s: write it with --hf DIR\n",
                    fam, fc.rope_scaling ? " with RoPE scaling" : "");
            goto out;
        }
        st = attn_llm_save_gguf(ctx, llm, tok, type == 1 ? ATTN_Q_Q8_0 : ATTN_Q_F32, gguf);
        if (st != ATTN_OK) {
            attn_cli_fail(ctx, "export", st); /* the writer's message names path and reason */
            goto out;
        }
        printf("wrote %s (%s)\n", gguf, type == 1 ? "Q8_0" : "F32");
    } else {
        if (!write_hf("export", ctx, llm, from_dir ? src : NULL, hf)) goto out;
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
