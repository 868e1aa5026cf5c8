/* Helpers shared by the training tasks (dates, charlm): time, checkpoint metadata. */
#ifndef ATTN_TRAIN_UTIL_H
#define ATTN_TRAIN_UTIL_H
#include "internal.h"
#include "attn_tasks.h"

/* Seconds on a monotonic clock. */
ATTN__HIDDEN double attn__now_s(void);
/* Metadata entries as decimal integers and floats ("%.9g": float round-trips exactly). */
ATTN__HIDDEN attn_status attn__meta_put_i(attn_st_writer *w, const char *k, long long v);
ATTN__HIDDEN attn_status attn__meta_put_f(attn_st_writer *w, const char *k, double v);
/* Reads them back; a missing or malformed entry is ATTN_E_FORMAT naming it. */
ATTN__HIDDEN attn_status attn__meta_get_i(attn_ctx *ctx, const attn_st *st, const char *k,
                                          int64_t *v);
ATTN__HIDDEN attn_status attn__meta_get_f(attn_ctx *ctx, const attn_st *st, const char *k,
                                          float *v);

/* Data parallelism (attn_train_dp, attn_tasks.h) and accumulation: checks the table and that
 * nranks x accum (0: 1) shares divide the global batch (ATTN_E_INVALID naming them otherwise);
 * dp NULL is one process. */
ATTN__HIDDEN attn_status attn__dp_check(attn_ctx *ctx, const attn_train_dp *dp, int accum,
                                        int64_t batch, const char *task);
/* attn_train_run's options from a task's config (dates, charlm, lm): the fields they share. */
#define ATTN__TRAIN_OPTIONS(o, c, resume_path, progress_fn, progress_user)                   \
    do {                                                                                      \
        (o) = attn_train_defaults();                                                          \
        (o).steps = (c).steps, (o).warmup = (c).warmup, (o).lr = (c).lr;                       \
        (o).lr_min = (c).lr_min, (o).weight_decay = (c).weight_decay, (o).clip = (c).clip;     \
        (o).accum = (c).accum, (o).time_limit_s = (c).time_limit_s;                           \
        (o).eval_every = (c).eval_every, (o).state_path = (c).state_path;                     \
        (o).save_every = (c).save_every, (o).log_path = (c).log_path, (o).dp = (c).dp;        \
        (o).tb_dir = (c).tb_dir;                                                              \
        (o).resume_name = (resume_path), (o).progress = (progress_fn);                        \
        (o).user = (progress_user);                                                           \
    } while (0)
/* TensorBoard event files (tfevents.c): a new events.out.tfevents.* file in an existing
 * directory, its first record written; then one Event of scalars per call (tags of at most
 * 100 bytes, at most 1 KiB a record); close takes NULL and a closed one. */
typedef struct attn__tb {
    int fd;
    char path[4160];
} attn__tb;
ATTN__HIDDEN attn_status attn__tb_open(attn_ctx *ctx, const char *dir, attn__tb *tb);
ATTN__HIDDEN attn_status attn__tb_scalars(attn_ctx *ctx, attn__tb *tb, int64_t step,
                                          const char *const *tags, const float *vals, int n);
ATTN__HIDDEN void attn__tb_close(attn__tb *tb);
/* train.dtype ("--dtype": dtype, NULL "f32") into s[n] unless the run resumes (resume, NULL:
 * not) a checkpoint from before it existed, which has none and counts as "f32"; returns the new
 * n (dates, charlm). */
ATTN__HIDDEN int attn__setting_dtype(attn_train_setting *s, int n, const char *dtype,
                                     const attn_st *resume);
/* The resume settings (attn_train_setting) of a config with the model fields d_model, nhead,
 * num_layers, dim_feedforward, dropout and the training fields batch, steps, warmup, lr,
 * lr_min, weight_decay, clip, seed (dates, charlm): appended to s at n. */
#define ATTN__SETTINGS_MODEL(s, n, c)                                                         \
    do {                                                                                      \
        attn_train_setting_i(&(s)[(n)++], "train.d_model", "--d-model", (c)->d_model);        \
        attn_train_setting_i(&(s)[(n)++], "train.heads", "--heads", (c)->nhead);              \
        attn_train_setting_i(&(s)[(n)++], "train.layers", "--layers", (c)->num_layers);       \
        attn_train_setting_i(&(s)[(n)++], "train.ff", "--ff", (c)->dim_feedforward);          \
        attn_train_setting_f(&(s)[(n)++], "train.dropout", "--dropout", (c)->dropout);        \
    } while (0)
#define ATTN__SETTINGS_TRAIN(s, n, c)                                                         \
    do {                                                                                      \
        attn_train_setting_i(&(s)[(n)++], "train.batch", "--batch", (c)->batch);              \
        attn_train_setting_i(&(s)[(n)++], "train.steps", "--steps", (c)->steps);              \
        attn_train_setting_i(&(s)[(n)++], "train.warmup", "warmup", (c)->warmup);             \
        attn_train_setting_f(&(s)[(n)++], "train.lr", "--lr", (c)->lr);                       \
        attn_train_setting_f(&(s)[(n)++], "train.lr_min", "lr_min", (c)->lr_min);             \
        attn_train_setting_f(&(s)[(n)++], "train.weight_decay", "weight_decay",               \
                             (c)->weight_decay);                                              \
        attn_train_setting_f(&(s)[(n)++], "train.clip", "clip", (c)->clip);                   \
        attn_train_setting_i(&(s)[(n)++], "train.seed", "--seed", (long long)(c)->seed);      \
    } while (0)
/* x[0 .. n-1] *= s (a rank's loss gradient scaled to its share of the global count). */
ATTN__HIDDEN void attn__scale_f(float *x, int64_t n, float s);
#endif
