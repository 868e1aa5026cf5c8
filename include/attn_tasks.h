/*
 * attn_tasks.h -- DEMO TIER of attn: two complete training tasks built on the core API of
 * attn.h, the dates translator (an attn_seq2seq model) and a character-level GPT (charlm).
 * The attn program's `train`, `translate`, `heatmap`, `generate` and `demo` commands run them.
 *
 * They are examples of whole training loops (data, schedule, evaluation, checkpoints), kept in
 * the library so that they are deterministic and tested like the rest.  THIS TIER MAY CHANGE
 * AT ANY RELEASE (configs, checkpoint formats, functions): build on the core API of attn.h,
 * not on these.  The declarations are in the same library (link attn as usual).
 */
#ifndef ATTN_TASKS_H
#define ATTN_TASKS_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
 * Data parallelism (optional, for both tasks).  The tasks know no MPI: a run split across
 * processes hands them this table, which attn_mpi.h's attn_dp_train_hooks fills in (or any
 * other implementation with the same contract).  With it, every process runs the same global
 * batch schedule; process `rank` of `nranks` takes the examples [rank B/N, (rank + 1) B/N) of
 * each global batch of B (B must be a multiple of N: refused with ATTN_E_INVALID before any
 * work), scales its loss gradient by its share of the global token count, and the gradients
 * are summed over the processes before clipping and AdamW, so that every process holds the
 * same weights, bit for bit.  Only rank 0 writes the training state (state_path); every rank
 * calls progress with the global loss.  All functions return ATTN_OK or fail with a message in
 * ctx; a failure (another rank that hangs: ATTN_E_TIMEOUT) ends the training with it.
 * ========================================================================================== */
typedef struct attn_train_dp {
    int rank, nranks;
    void *user;
    /* before a step's backward: m's gradients are to be summed over the processes (an
     * implementation may start parts of the sum during the backward, from the context's
     * gradient-ready hook, attn_ctx_set_grad_ready) */
    attn_status (*begin)(void *user, attn_ctx *ctx, attn_module *m);
    /* after the backward: returns once m's gradients hold their sum over the processes, the
     * same bits on every process */
    attn_status (*end)(void *user, attn_ctx *ctx, attn_module *m);
    /* x[0 .. n-1] becomes its sum over the processes, the same bits on every process */
    attn_status (*sum)(void *user, attn_ctx *ctx, double *x, int n);
} attn_train_dp;

/* What a training loop reports after each step. */
typedef struct attn_train_progress {
    int64_t step, steps;      /* steps done, planned */
    float loss, lr, grad_norm;
    double elapsed_s, eta_s, tokens_per_s; /* tokens_per_s: the task's items (images: vit) */
    float accuracy;           /* held-out exact match of this step's evaluation, or -1 */
    float val_bpc;            /* charlm: validation bits per character of this step's
                                 evaluation; 0 when the step has none (and in other tasks) */
    int evaluated;            /* this step ran the task's evaluation */
    float eval_loss;          /* lm, vit: its held-out loss (0 when none) */
    int ranks;                /* processes training (1 without data parallelism) */
} attn_train_progress;
/* Called after every step; return nonzero to stop training early. */
typedef int (*attn_progress_fn)(void *user, const attn_train_progress *p);

/* ============================================================================================
 * One training loop for every task (src/train/loop.c).  attn_train_run takes a task -- a model
 * and a few callbacks: the forward and loss of one share of a step's batch, its backward, an
 * evaluation, the task's checkpoint metadata -- and does the rest once for all of them: the
 * warmup + cosine schedule, AdamW, gradient clipping, gradient accumulation, data parallelism,
 * the time limit, evaluation, periodic and final checkpoints, resume, a JSON-lines log and a
 * progress callback.  dates, charlm, lm (attn_lm_train) and the attn program's vit are tasks.
 *
 * A step's global batch is cut into shares = accum x nranks; process r runs shares
 * [r accum, (r + 1) accum), one after another, each forward then backward into the same
 * gradients.  A share's loss gradient is scaled by its count / count_step (the share's part
 * of the items the step's loss averages over) so that the gradients sum to those of the whole
 * batch's mean loss; with one share nothing is scaled.  Checkpoints (written to a temporary
 * file, synced and renamed: an interrupted write leaves the previous one) hold "model.*",
 * "optim.*", metadata task, train_step, the task's settings ("train.KEY") and whatever describe
 * adds: an interrupted and resumed run writes the same bytes as the uninterrupted one.  A progress callback asking to stop (e.g. on SIGINT) gets a checkpoint
 * of the step just done before attn_train_run returns.
 * ========================================================================================== */
/* A setting a resumed run must share with the run it continues: stored as metadata key (e.g.
 * "train.batch"), compared as text on resume; option names it in the message ("--batch"). */
typedef struct attn_train_setting {
    const char *key, *option;
    char value[72];
} attn_train_setting;
/* Fill one (the value as "%lld", "%.9g" or the string, cut to fit). */
ATTN_API void attn_train_setting_i(attn_train_setting *s, const char *key, const char *option,
                                   long long v);
ATTN_API void attn_train_setting_f(attn_train_setting *s, const char *key, const char *option,
                                   double v);
ATTN_API void attn_train_setting_s(attn_train_setting *s, const char *key, const char *option,
                                   const char *v);

/* What a share's forward reports. */
typedef struct attn_train_share {
    float loss;        /* the mean loss over this share's items */
    double count;      /* the items (tokens, images) that mean is over */
    double count_step; /* the items of the whole step's batch (every share, every process) */
    double items;      /* items processed (for throughput: e.g. source + target tokens) */
} attn_train_share;

typedef struct attn_train_task {
    const char *name;  /* "dates", "charlm", "lm", "vit": metadata "task" and the log's; 1 to 64
                          of A-Z a-z 0-9 _ - . */
    const char *unit;  /* what items are: "tokens", "images" (NULL: "items"; as name) */
    attn_module *model; /* trained in place; gradients enabled by attn_train_run */
    void *user;
    /* Forward and loss of share `share` of `shares` of the global batch of step `step` (0-based;
     * the shares partition the batch), activations saved into sv, the loss gradient kept by
     * the task for backward. */
    attn_status (*forward)(void *user, attn_ctx *ctx, int64_t step, int share, int shares,
                           attn_saved *sv, attn_train_share *out);
    /* The backward of that forward, its loss gradient multiplied by scale first (1: as is):
     * accumulates into the model's gradients. */
    attn_status (*backward)(void *user, attn_ctx *ctx, attn_saved *sv, float scale);
    /* Optional: evaluates after `step` steps, filling p's metrics (accuracy, val_bpc,
     * eval_loss); *stop = 1 ends the run (a target reached). */
    attn_status (*evaluate)(void *user, attn_ctx *ctx, int64_t step, attn_train_progress *p,
                            int *stop);
    /* Optional: the task's own checkpoint metadata and tensors (its config, data identity). */
    attn_status (*describe)(void *user, attn_ctx *ctx, attn_st_writer *w);
    const attn_train_setting *settings; /* checked on resume, stored in checkpoints */
    int nsettings;
} attn_train_task;

typedef struct attn_train_options {
    int64_t steps, warmup;      /* the schedule: warmup, then cosine decay to lr_min at steps */
    float lr, lr_min, weight_decay, clip; /* clip: the gradient's global L2 norm to it; 0: no
                                   clipping, the norm still computed (grad_norm); negative:
                                   neither (grad_norm 0: a step without the norm's pass) */
    int accum;                  /* shares run one after another per process (1) */
    double time_limit_s;        /* stop (with a checkpoint) after this many seconds (0: none) */
    int64_t eval_every;         /* evaluate every this many steps (0: only at the run's end) */
    int64_t stop_at;            /* stop after this step, with a checkpoint (0: steps) */
    const char *state_path;     /* checkpoints here (NULL: none; rank 0 writes) */
    int64_t save_every;         /* ... every this many steps and at the end (0: end only) */
    const char *log_path;       /* JSON lines, one per step (NULL: none; rank 0 writes; a
                                   resumed run keeps the lines up to its step and appends) */
    const char *resume_name;    /* the checkpoint's name in messages (resume_path) */
    const attn_train_dp *dp;    /* NULL: one process */
    attn_progress_fn progress;  /* after every step (may be NULL); nonzero: stop */
    void *user;
} attn_train_options;
/* 1 step (0: none, the model as it is), lr 1e-3, lr_min 0, weight decay 0, clip 1, accum 1, the rest 0/NULL. */
ATTN_API attn_train_options attn_train_defaults(void);

/* How a run ended. */
typedef enum attn_train_end {
    ATTN_TRAIN_DONE = 0,   /* all steps */
    ATTN_TRAIN_STOPPED,    /* progress asked to stop */
    ATTN_TRAIN_TIME_LIMIT, /* time_limit_s */
    ATTN_TRAIN_TARGET,     /* evaluate reached the task's target */
    ATTN_TRAIN_STOP_AT     /* stop_at */
} attn_train_end;
typedef struct attn_train_result {
    int64_t step;          /* steps done, the resumed ones included */
    float loss;            /* the last step's loss (0: none run) */
    attn_train_end end;
    double elapsed_s;      /* training time, that of the run continued included */
} attn_train_result;

/* Trains task->model from its current weights, or continues the run of the checkpoint resume
 * (NULL: a new run; its task, settings, optimiser and step are checked and loaded: a setting
 * that differs is ATTN_E_INVALID naming the option and both values).  A non-finite loss stops
 * the run with ATTN_E_NONFINITE before the step is taken.  result may be NULL. */
ATTN_API attn_status attn_train_run(attn_ctx *ctx, const attn_train_task *task,
                                    const attn_train_options *o, const attn_st *resume,
                                    attn_train_result *result);

/* ============================================================================================
 * Task: dates.  An attn_seq2seq translator learns to turn dates written by people
 * ("21 Nov 2026", "saturday, november 21, 2026", "11/21/26", "the 3rd of may 1999", 22
 * formats) into ISO form ("2026-11-21").  The data generator is part of the library and
 * deterministic; about 1 date in 20 is held out and never appears in training.  Characters are
 * the tokens (vocabulary: 0 <pad>, 1 <bos>, 2 <eos>, 3 <unk>, then " ',-./", digits, letters).
 * ========================================================================================== */
typedef struct attn_dates_config {
    /* model */
    int64_t d_model, nhead, num_layers, dim_feedforward; /* num_layers: encoder and decoder */
    float dropout;
    int norm_first;
    int fold_case;          /* map capitals to small letters before encoding */
    /* training */
    int64_t batch, steps, warmup;
    float lr, lr_min, weight_decay, clip, label_smoothing;
    uint64_t seed;
    double time_limit_s;    /* stop after this many seconds (0: no limit) */
    int64_t eval_every;     /* evaluate on the held-out dates every this many steps (0: end) */
    int eval_n;             /* held-out dates per evaluation (1000) */
    float target_accuracy;  /* stop once a held-out evaluation reaches it (0: never) */
    const char *state_path; /* resumable state (model, optimiser, step) written here (NULL: no) */
    int64_t save_every;     /* ... every this many steps and at the end (0: only at the end) */
    const attn_train_dp *dp; /* NULL, or data parallelism across processes (see above) */
    const char *log_path;   /* JSON lines, one per step (attn_train_options; NULL: none) */
    int accum;              /* gradient accumulation: shares per process and step (1) */
} attn_dates_config;
ATTN_API attn_dates_config attn_dates_defaults(void);

/* Trains from scratch, or continues from resume_path (a state file written during an earlier
 * run with the same config), and returns the model (*model, caller frees).  progress may be
 * NULL.  Deterministic: the same config gives bit-identical losses whatever the thread count,
 * and a resumed run continues exactly as the uninterrupted one. */
ATTN_API attn_status attn_dates_train(attn_ctx *ctx, const attn_dates_config *cfg,
                                      const char *resume_path, attn_progress_fn progress,
                                      void *user, attn_module **model /* OUT */);
/* Exact-match accuracy of greedy translations on n held-out dates (a set fixed by seed). */
ATTN_API attn_status attn_dates_evaluate(attn_ctx *ctx, const attn_module *model,
                                         const attn_dates_config *cfg, int n, uint64_t seed,
                                         float *accuracy /* OUT */);
/* Translates one phrase: iso (cap >= 11 bytes) receives the output text.  cross (may be NULL):
 * [11, n] floats, n = strlen(text), receives the last decoder layer's cross-attention weights
 * (mean over heads) of each output step: row i for output character i, row 10 for <eos>. */
ATTN_API attn_status attn_dates_translate(attn_ctx *ctx, const attn_module *model,
                                          const attn_dates_config *cfg, const char *text,
                                          char *iso, size_t cap, float *cross);
/* Checkpoints: the model's parameters under PyTorch state_dict names plus metadata holding
 * the config (loadable into the equivalent PyTorch module), and a resumable training state
 * (model, optimiser, step). */
ATTN_API attn_status attn_dates_save(attn_ctx *ctx, const attn_module *model,
                                     const attn_dates_config *cfg, const char *path);
ATTN_API attn_status attn_dates_load(attn_ctx *ctx, const char *path,
                                     attn_dates_config *cfg /* OUT */,
                                     attn_module **model /* OUT */);

/* ============================================================================================
 * Task: charlm.  A decoder-only Transformer (attn_gpt_*, pre-norm layers with GELU) learns a
 * text one byte at a time and is measured in bits per character: the mean cross-entropy of
 * the next byte on held-out text, in bits (nats / ln 2).  A character is a byte (UTF-8 text
 * is learnt byte by byte).
 *
 *  Vocabulary: a sorted set of distinct bytes 1..255 (NUL is never a token), token id i being
 *  vocab[i].  attn_charlm_train fills it in with the bytes that occur in the text when
 *  cfg->vocab_size is 0 on entry, else uses the one given (every byte of the text must be in
 *  it).  Checkpoints keep it in their metadata.
 *  Split: the first len - len/10 bytes train, the last len/10 bytes validate (contiguous).
 *  Batches: row r of step s is the window of block_size + 1 bytes of the training split
 *  starting at an offset drawn by a counter-based hash of (seed, s * batch + r): inputs are
 *  its first block_size bytes, targets the next byte of each.  Runs are deterministic for a
 *  seed and independent of the thread count; a resumed run continues exactly.
 *  Evaluation: the validation split cut into consecutive windows of at most block_size
 *  inputs, each byte after the first predicted once.
 * ========================================================================================== */
typedef struct attn_charlm_config {
    /* model */
    int64_t d_model, nhead, num_layers, dim_feedforward;
    float dropout;
    int64_t block_size;     /* context length in bytes (the GPT's max_positions) */
    int vocab_size;         /* tokens, 1..255; 0 = the bytes of the text (set by training) */
    unsigned char vocab[256]; /* vocab[0 .. vocab_size-1], strictly increasing, no 0 */
    /* training */
    int64_t batch, steps, warmup;
    float lr, lr_min, weight_decay, clip;
    uint64_t seed;
    double time_limit_s;    /* stop after this many seconds (0: no limit) */
    int64_t eval_every;     /* validation bpc every this many steps (0: at the end only) */
    const char *state_path; /* resumable state (model, optimiser, step) written here (NULL: no) */
    int64_t save_every;     /* ... every this many steps and at the end (0: only at the end) */
    const attn_train_dp *dp; /* NULL, or data parallelism across processes (above) */
    const char *log_path;   /* JSON lines, one per step (attn_train_options; NULL: none) */
    int accum;              /* gradient accumulation: shares per process and step (1) */
} attn_charlm_config;
/* d_model 128, 4 heads, 3 layers, ff 512, dropout 0, block 64, batch 32, 600 steps (about 5
 * minutes on one core), warmup 100, lr 4e-3 -> 1e-4 (cosine), weight decay 0.01, clip 1,
 * seed 1, eval every 100. */
ATTN_API attn_charlm_config attn_charlm_defaults(void);

/* Trains from scratch on text[0 .. len-1] (no NUL bytes; the training split must hold
 * block_size + 1 bytes and the validation split 2), or continues from resume_path (a state
 * written by an earlier run with the same model, batch, seed and text), and returns the model
 * (*model, caller frees).  cfg is IN/OUT: only the vocabulary is written (see above).
 * progress (may be NULL) is called after every step; val_bpc is set on evaluation steps. */
ATTN_API attn_status attn_charlm_train(attn_ctx *ctx, attn_charlm_config *cfg,
                                       const char *text, size_t len, const char *resume_path,
                                       attn_progress_fn progress, void *user,
                                       attn_module **model /* OUT */);
/* Bits per character on the validation split of text (the same text as training). */
ATTN_API attn_status attn_charlm_evaluate(attn_ctx *ctx, const attn_module *model,
                                          const attn_charlm_config *cfg, const char *text,
                                          size_t len, float *bpc /* OUT */);
/* Continues prompt (NULL or "" = a newline, or vocab[0] if the vocabulary has none; bytes
 * must be in the vocabulary; only its last block_size bytes are seen) by n_chars bytes, which
 * out receives followed by a NUL (cap >= n_chars + 1).  Each byte is drawn from
 * softmax(logits / temperature) restricted to the top_k most likely (0 = all), with a uniform
 * number hashed from (seed, position): the same arguments give the same text.  temperature 0
 * is greedy (the most likely byte, the lowest id on ties), and so is top_k 1. */
ATTN_API attn_status attn_charlm_generate(attn_ctx *ctx, const attn_module *model,
                                          const attn_charlm_config *cfg, const char *prompt,
                                          int64_t n_chars, float temperature, int top_k,
                                          uint64_t seed, char *out, size_t cap);
/* Checkpoints: the GPT's parameters under its state_dict names plus metadata with the config
 * and the vocabulary (metadata "vocab": two hex digits per byte).  attn_charlm_load also
 * reads the model of a training state (cfg->state_path). */
ATTN_API attn_status attn_charlm_save(attn_ctx *ctx, const attn_module *model,
                                      const attn_charlm_config *cfg, const char *path);
ATTN_API attn_status attn_charlm_load(attn_ctx *ctx, const char *path,
                                      attn_charlm_config *cfg /* OUT */,
                                      attn_module **model /* OUT */);

#ifndef ATTN_CORE_ONLY /* attn_llm is of attn.h's extra tier */
/* ============================================================================================
 * Task: lm.  Fine-tunes an attn_llm (any family attn runs, made trainable with
 * attn_llm_make_trainable) on a sequence of token ids: random windows of len + 1 tokens from
 * the training part (all but the last held_out fraction), next-token cross-entropy, the loop
 * of attn_train_run.  The attn program's `train lm` reads the model and the text, tokenizes it
 * and writes the result as a HF folder.
 * ========================================================================================== */
typedef struct attn_lm_train_config {
    int64_t batch, len;       /* windows per step, tokens per window */
    int64_t steps, warmup;
    float lr, lr_min, weight_decay, clip;
    double held_out;          /* the last fraction of the tokens, for evaluation (0 < x < 1) */
    int64_t eval_every;       /* held-out loss every this many steps (0: the end only) */
    int64_t eval_windows;     /* held-out windows per evaluation (0: all) */
    uint64_t seed;            /* the windows' order */
    double time_limit_s;
    int64_t stop_at;          /* stop after this step with a checkpoint (0: steps) */
    const char *state_path;   /* checkpoints (NULL: none) */
    int64_t save_every;
    const char *log_path;     /* JSON lines (NULL: none) */
    const attn_train_dp *dp;
    int accum;
    const char *init;         /* where the model came from: checkpoint metadata "init" */
    const attn_train_setting *settings; /* the caller's settings (its option names), stored in
                                           checkpoints and checked on resume */
    int nsettings;
} attn_lm_train_config;
/* batch 4, len 128, 100 steps, warmup 10, lr 1e-4, lr_min 1e-5, weight decay 0, clip 1,
 * held out 0.1, eval every 50 on 16 windows, seed 1, save every 50, accum 1. */
ATTN_API attn_lm_train_config attn_lm_train_defaults(void);
/* The split of n tokens: *ntrain for training, the rest held out; ATTN_E_INVALID (naming the
 * counts) when either part cannot hold one window of len + 1 tokens. */
ATTN_API attn_status attn_lm_train_split(attn_ctx *ctx, const attn_lm_train_config *cfg,
                                         int64_t n, int64_t *ntrain /* OUT */);
/* The mean next-token loss of llm on the held-out part's windows (cfg->eval_windows of them). */
ATTN_API attn_status attn_lm_evaluate(attn_ctx *ctx, const attn_llm *llm,
                                      const attn_lm_train_config *cfg, const int32_t *tokens,
                                      int64_t n, double *loss /* OUT */);
/* Trains llm's module in place from its weights, or continues the checkpoint resume (NULL: a
 * new run).  progress and result may be NULL. */
ATTN_API attn_status attn_lm_train(attn_ctx *ctx, attn_llm *llm, const int32_t *tokens,
                                   int64_t n, const attn_lm_train_config *cfg,
                                   const attn_st *resume, attn_progress_fn progress, void *user,
                                   attn_train_result *result);
#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTN_TASKS_H */
