/*
 * attn_tasks.h -- DEMO TIER of attn: complete training tasks built on the API of attn.h, on
 * one training loop (attn_train_run): the dates translator (an attn_seq2seq model), a
 * character-level GPT (charlm), LLM fine-tuning (lm) and a Vision Transformer on
 * Fashion-MNIST (vit, with its image data readers, attn_images_*).  The attn program's
 * `train`, `translate`, `heatmap`, `generate`, `demo`, `classify` and `attention-map` commands
 * run them.
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
/* Checks that checkpoint holds settings s[0 .. n-1] with the same values: ATTN_E_INVALID naming
 * the first that differs (its option, both values; name: the checkpoint's, NULL "the
 * checkpoint"); ATTN_E_FORMAT if it is no training checkpoint (no metadata train_step).  attn_train_run does this on resume; a task that builds its model from the
 * checkpoint calls it first, so that a different shape is named rather than failing to load. */
ATTN_API attn_status attn_train_check_settings(attn_ctx *ctx, const attn_st *checkpoint,
                                               const char *name, const attn_train_setting *s,
                                               int n);

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
    const char *tb_dir;         /* TensorBoard: an existing directory where rank 0 writes a new
                                   events.out.tfevents.* file per run, the log's scalars every
                                   step (NULL: none; `tensorboard --logdir` reads them) */
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
    const char *tb_dir;     /* TensorBoard event files here (attn_train_options; NULL: none) */
    int accum;              /* gradient accumulation: shares per process and step (1) */
    const char *dtype;      /* the products' type, kept as train.dtype: as attn_charlm_config's */
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
    const char *tb_dir;     /* TensorBoard event files here (attn_train_options; NULL: none) */
    int accum;              /* gradient accumulation: shares per process and step (1) */
    const char *dtype;      /* the products' type as the caller names it ("f32", "bf16"; NULL:
                             * "f32"), kept as train.dtype, which a resumed run must share (a
                             * checkpoint without it counts as "f32"); the context's
                             * ATTN_CTX_BF16_MATMUL runs the products */
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

/* ============================================================================================
 * Image data (src/io/images.c): sets of same-size 8-bit grayscale images with labels, as the
 * vit task reads them.  IDX files (MNIST, Fashion-MNIST; raw or gzipped, told by their first
 * bytes), single PGM (P2, P5) or PNG images, a seeded shuffle and batches with augmentation.
 * Sizes a file claims are checked against what it can hold before memory is taken (a raw file
 * against its size, a gzip stream against 1032 times its compressed size).  gzip and PNG need
 * zlib, compiled in when CMake finds it (option ATTN_ZLIB); without it they are refused with
 * ATTN_E_UNSUPPORTED and a message saying how to get it.  Failures: ATTN_E_IO (the file cannot
 * be read), ATTN_E_FORMAT (not what it should be), ATTN_E_UNSUPPORTED (over a bound), ATTN_E_NOMEM,
 * each with a message naming the file.  The pixels and labels are malloc'ed: free a set with
 * attn_images_free.
 * ========================================================================================== */
typedef struct attn_images {
    int64_t n, rows, cols; /* images, height, width */
    uint8_t *pixels;       /* [n, rows, cols], row-major, 0 = black */
    uint8_t *labels;       /* [n], or NULL when no label file was read */
    int num_classes;       /* 1 + the largest label of the whole label file, also when max_n
                              kept fewer images (0 without labels) */
} attn_images;

/* An IDX3 ubyte image file and (labels_path not NULL) its IDX1 ubyte label file.  max_n > 0
 * keeps the first max_n images only (the rest of the file is not read).  Refused: a bad magic
 * number or element type, a dimension of 0 or a product that overflows, a file holding fewer
 * or more bytes than its header claims, a label count that differs from the image count,
 * labels >= max_label (0: no limit), a corrupt gzip stream, more pixels than half this
 * machine's memory. */
ATTN_API attn_status attn_images_idx_load(attn_ctx *ctx, const char *images_path,
                                          const char *labels_path, int64_t max_n, int max_label,
                                          attn_images *out /* OUT */);
/* A Fashion-MNIST / MNIST folder: "train-images-idx3-ubyte" and "train-labels-idx1-ubyte"
 * (train = 1) or "t10k-..." (train = 0), each with or without ".gz" (".gz" tried first). */
ATTN_API attn_status attn_images_mnist_load(attn_ctx *ctx, const char *dir, int train,
                                            int64_t max_n, attn_images *out /* OUT */);
/* One image from a PGM (P2 or P5, maxval <= 255, or 16-bit scaled down) or PNG file (8-bit
 * gray, gray+alpha, RGB, RGBA or palette, 16-bit scaled; not interlaced; colour turned to gray
 * as 0.299 R + 0.587 G + 0.114 B, alpha composited on black): a set of one image, no labels.
 * Only regular files of at most 256 MiB and 2^26 pixels. */
ATTN_API attn_status attn_images_read_gray(attn_ctx *ctx, const char *path,
                                           attn_images *out /* OUT */);
/* Takes NULL and a zeroed set; leaves it zeroed. */
ATTN_API void attn_images_free(attn_images *s);

/* The order of epoch `epoch` of a run seeded with seed: perm[0..n) a permutation of 0..n-1
 * (Fisher-Yates driven by a counter-based generator: reproducible from (seed, epoch) alone,
 * whatever the thread count and on resume; the exact generator, as Python, opens
 * src/io/images.c).  n <= 0: nothing. */
ATTN_API void attn_images_shuffle(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm);

/* Augmentation: a random crop of the image padded by pad zero pixels on every side (0: none)
 * and a horizontal flip with probability 1/2 (flip = 0: never). */
typedef struct attn_images_aug {
    int pad;  /* 0..4096 */
    int flip;
} attn_images_aug;

/* out [B, rows, cols] receives images idx[0..B) of s (each in [0, s->n), else ATTN_E_INVALID)
 * as (pixel / 255 - mean) / std, padding pixels 0 before that, and labels [B] (-1 where s has
 * none; NULL: not wanted).  aug NULL: none.  The random choices for image idx[i] depend only on
 * (seed, stream, idx[i]) (pass the epoch or step as stream). */
ATTN_API attn_status attn_images_batch(attn_ctx *ctx, const attn_images *s, const int64_t *idx,
                                       int64_t B, const attn_images_aug *aug, uint64_t seed,
                                       uint64_t stream, float mean, float std, float *out,
                                       int64_t *labels);

/* Fashion-MNIST's training-set pixel mean and standard deviation (of pixel / 255), and its
 * class names (k in 0..9; NULL otherwise). */
#define ATTN_FASHION_MEAN 0.2860f
#define ATTN_FASHION_STD 0.3530f
ATTN_API const char *attn_fashion_class(int64_t k);

/* ============================================================================================
 * Task: vit.  A Vision Transformer (attn_vit_*: patches, a [CLS] token, learned positions,
 * pre-norm encoder layers with GELU, a linear head) learns to classify square grayscale images
 * (Fashion-MNIST's clothes) on the loop of attn_train_run: epoch e visits the training set in
 * the order attn_images_shuffle(seed, e), batch after batch (the last one shorter), each image
 * augmented by attn_images_batch with stream e; step g's dropout is offset g << 16 of the
 * seed's stream; cross-entropy with label smoothing; after every epoch the whole test set
 * (test loss and accuracy).  A run is a function of its config alone (not of the thread
 * count) and resumes inside an epoch exactly.  The attn program's `train vit` runs it;
 * `classify` and `attention-map` read its models.
 *
 * Files (each NULL: not written): state_path the loop's checkpoints (every save_every steps
 * and after every epoch), model_path after every epoch (the parameters under their state_dict
 * names, the config in the metadata: task "vit"), csv_path one line per epoch (epoch, then the
 * ATTN_VIT_LOG_* columns), log_path the loop's JSON lines, tb_dir its TensorBoard events.
 * With data parallelism only rank 0 writes.
 * ========================================================================================== */
/* The columns of the per-epoch log (log.csv, the checkpoint's "log.epochs"). */
enum {
    ATTN_VIT_LOG_TRAIN_LOSS, ATTN_VIT_LOG_TEST_LOSS, ATTN_VIT_LOG_TEST_ACC, ATTN_VIT_LOG_LR,
    ATTN_VIT_LOG_TRAIN_IPS, ATTN_VIT_LOG_EVAL_IPS, ATTN_VIT_LOG_ELAPSED, ATTN_VIT_LOG_COLS
};
/* "train_loss", "test_loss", "test_accuracy", "lr", "train_images_per_s",
 * "eval_images_per_s", "elapsed_s"; NULL outside 0..ATTN_VIT_LOG_COLS-1. */
ATTN_API const char *attn_vit_log_name(int col);

/* Where a run stands, for the callbacks and the caller.  After a successful attn_vit_train the
 * logs it points to belong to the report: attn_vit_train_report_free releases them. */
typedef struct attn_vit_train_report {
    int64_t train_images, test_images, batch; /* batch: the images per step (<= train_images) */
    int64_t steps_per_epoch, steps, last_epoch; /* steps: of all epochs; last_epoch: stop_after */
    int64_t parameters;
    int64_t resumed_epochs, resumed_steps; /* where the checkpoint resumed stood (0: new run) */
    int64_t epochs_done, steps_done;
    double elapsed_s;         /* the run's time at the last epoch's end, resumed time included */
    const float *step_loss;   /* [steps]: each step's loss, [0, steps_done) filled */
    const float *epoch_log;   /* [epochs, ATTN_VIT_LOG_COLS]: [0, epochs_done) filled */
    /* this call's: */
    double train_s, eval_s;   /* training time, test time (train_s runs on during an epoch) */
    double now_s, run_elapsed_s; /* at the last callback: the monotonic clock, the run's time */
    int64_t images_seen, evals, steps_run;
    double test_loss, test_accuracy; /* the last test pass's (unrounded) */
    attn_train_end end;       /* how the call ended, at step end_step */
    int64_t end_step;
} attn_vit_train_report;

typedef struct attn_vit_train_config {
    /* model: patch side, width, heads, layers, feed-forward width, classes; dropout */
    int64_t patch, d_model, nhead, num_layers, dim_feedforward, num_classes;
    float dropout;
    float pixel_mean, pixel_std; /* the normalisation (stored in the model's metadata) */
    /* training */
    int64_t epochs, batch, warmup; /* warmup steps, then cosine decay to 0 */
    float lr, weight_decay, clip, label_smoothing;
    uint64_t seed;                 /* initial weights, order, augmentation, dropout */
    int augment, pad;              /* augment: crop (padded by pad) and flip */
    int64_t eval_batch;            /* images per forward pass of the test (no effect on results) */
    int64_t stop_after;            /* stop after this epoch (0: epochs; the schedule spans epochs) */
    int accum;                     /* shares per process and step (0, 1: one) */
    int64_t save_every;            /* checkpoints every this many steps (0: after each epoch) */
    const char *dtype;             /* the products' type as the caller names it ("f32", "bf16"):
                                      a setting resumed runs must share (NULL: "f32") */
    const char *data_name;         /* where the images came from, in messages (NULL: "the data") */
    const char *state_path, *model_path, *csv_path, *log_path;
    const char *tb_dir;            /* TensorBoard event files here (attn_train_options) */
    const char *resume_name;       /* the checkpoint resumed, in messages */
    const char *save_init;         /* a new run: the initial weights as a model file (rank 0;
                                      NULL: none) */
    const attn_train_dp *dp;       /* NULL: one process */
    /* callbacks (each may be NULL), called on every rank: */
    void *user;
    /* once everything is loaded, before the first step */
    attn_status (*on_start)(void *user, attn_ctx *ctx, const attn_vit_train_report *r);
    /* after every step (p as attn_progress_fn's); nonzero: stop with a checkpoint */
    int (*on_step)(void *user, const attn_train_progress *p, const attn_vit_train_report *r);
    /* after every epoch's test pass and its files (the epoch is r->epochs_done) */
    attn_status (*on_epoch)(void *user, attn_ctx *ctx, const attn_vit_train_report *r);
} attn_vit_train_config;
/* patch 7, d_model 96, 4 heads, 4 layers, ff 192, 10 classes, dropout 0, Fashion-MNIST's pixel
 * mean and std; 20 epochs, batch 128, warmup 200, lr 2e-3, weight decay 0.05, clip 1, label
 * smoothing 0, seed 1, augment with pad 1, eval batch 256, accum 1. */
ATTN_API attn_vit_train_config attn_vit_train_defaults(void);

/* The model a config describes (pre-norm, GELU, layer norm eps 1e-6, one channel, images of
 * image_size). */
ATTN_API attn_vit_config attn_vit_train_model_config(const attn_vit_train_config *cfg,
                                                     int64_t image_size);
/* Checks train and test against cfg without training: square images of one size, labels below
 * num_classes, a patch that divides the side; ATTN_E_INVALID naming what is wrong. */
ATTN_API attn_status attn_vit_train_check(attn_ctx *ctx, const attn_images *train,
                                          const attn_images *test,
                                          const attn_vit_train_config *cfg);
/* Checks that the checkpoint resume continues a run of cfg on train (its model, where it stands,
 * its log), as attn_vit_train does first: ATTN_E_INVALID or ATTN_E_FORMAT naming what differs. */
ATTN_API attn_status attn_vit_train_resume_check(attn_ctx *ctx, const attn_images *train,
                                                 const attn_vit_train_config *cfg,
                                                 const attn_st *resume);
/* Trains a new model (or continues the checkpoint resume: its task, model and settings must be
 * cfg's) on train, testing on test after every epoch.  report (may be NULL) receives where the
 * run ended; *model (may be NULL) the trained model (caller frees). */
ATTN_API attn_status attn_vit_train(attn_ctx *ctx, const attn_images *train,
                                    const attn_images *test, const attn_vit_train_config *cfg,
                                    const attn_st *resume, attn_vit_train_report *report,
                                    attn_module **model /* OUT */);
ATTN_API void attn_vit_train_report_free(attn_vit_train_report *r); /* takes NULL */
/* The mean training loss of epoch e over its steps up to step g (0-based, g in epoch e), per
 * image; *images: the images it is over. */
ATTN_API double attn_vit_train_epoch_loss(const attn_vit_train_report *r, int64_t e, int64_t g,
                                          int64_t *images);
/* Mean loss and accuracy of model on a whole set (labels needed), eb images per pass. */
ATTN_API attn_status attn_vit_evaluate(attn_ctx *ctx, const attn_module *model,
                                       const attn_vit_config *vc, const attn_images *set,
                                       float mean, float std, int64_t eb, double *loss /* OUT */,
                                       double *accuracy /* OUT */);

/* A model written by attn_vit_train (its model file, or a checkpoint with prefix "model."):
 * the config in its metadata, checked against its tensors (nothing the metadata claims is
 * allocated unless the file backs it), and the pixel normalisation.  name: the file in
 * messages. */
typedef struct attn_vit_model_info {
    attn_vit_config cfg;
    float pixel_mean, pixel_std;
    char prefix[8];               /* "" or "model." */
} attn_vit_model_info;
ATTN_API attn_status attn_vit_model_read(attn_ctx *ctx, const attn_st *st, const char *name,
                                         attn_vit_model_info *info /* OUT */);
/* The model itself: attn_vit_model_read, then the module with the file's weights. */
ATTN_API attn_status attn_vit_model_load(attn_ctx *ctx, const attn_st *st, const char *name,
                                         attn_vit_model_info *info /* OUT */,
                                         attn_module **model /* OUT */);
/* The model file: the parameters under their state_dict names, the config in the metadata. */
ATTN_API attn_status attn_vit_model_save(attn_ctx *ctx, const attn_module *model,
                                         const attn_vit_model_info *info, const char *path);
/* The head-averaged attention matrices W [num_layers, L, L] (L = patches + 1) of every layer
 * for one image (normalised pixels [image_size^2]), through the layers' own modules built from
 * the weights in st (info: attn_vit_model_read's): the patch embedding, then per layer the
 * self-attention of norm1(x) with its weights averaged over the heads, and the layer. */
ATTN_API attn_status attn_vit_attention_layers(attn_ctx *ctx, const attn_st *st,
                                               const attn_vit_model_info *info,
                                               const float *image, float *W);
/* Attention rollout (Abnar & Zuidema 2020) of W [num_layers, L, L]: per layer A = W + I with
 * its rows renormalised, multiplied through the layers (the last on the left), in double;
 * roll [L - 1] receives the [CLS] row over the patches. */
ATTN_API attn_status attn_vit_attention_rollout(attn_ctx *ctx, const float *W,
                                                int64_t num_layers, int64_t L, float *roll);
/* Class probabilities of one image (normalised pixels [image_size^2]): p [num_classes], the
 * softmax of the logits in double; logits (may be NULL) [num_classes]. */
ATTN_API attn_status attn_vit_classify(attn_ctx *ctx, const attn_module *model,
                                       const attn_vit_config *vc, const float *image,
                                       float *logits, double *p);

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
    const char *tb_dir;       /* TensorBoard event files here (NULL: none) */
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
