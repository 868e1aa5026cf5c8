/* What the attn program's commands (cli/, bench/suite/) share: the data-parallel start-up,
 * errors and output, options, contexts, files, training settings, the charts of training logs.
 * The program is the only code that prints or exits.  The commands themselves are declared in
 * cli/commands.h and bench/suite/bench.h. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H
#include <stdio.h>

#include "attn.h"
#include "attn_tasks.h" /* the demo tier: dates and charlm, run by train, translate, ... */

/* common/train_dp.c: attn train dates|charlm|lm|vit under mpirun, data parallel (-DATTN_MPI=ON).
 * attn_cli_dp_init before the command (joins MPI when mpirun started this process; refuses
 * several ranks in a build without MPI; silences the standard output of ranks other than 0),
 * attn_cli_dp_expect_ready after it for a training command (cmd must outlive the command),
 * attn_cli_dp_open once the context exists (*hooks: the table for the task, NULL outside mpirun
 * or on one rank; filled by attn_cli_dp_ready; notes --WHAT = batch),
 * attn_cli_dp_note* for every setting that changes the result (an option's value as text, a
 * hash of data, of a file, of the initial parameters; name: the option, as messages show it,
 * a string that outlives the command; no-ops unless data parallel on several ranks;
 * note_file prints and returns 0 when it cannot read the file),
 * attn_cli_dp_ready(cmd, 1) once everything is loaded, just before training: every rank meets
 * there (a rank that stopped earlier meets it from attn_cli_dp_finish, failed); returns 1 on
 * every rank when a rank failed to start or a setting differs (named, with each rank's value,
 * by one rank), or the ranks do not divide the batch; 0: train,
 * attn_cli_dp_fail to report a failed status (a timeout stops the job: MPI_Abort),
 * attn_cli_dp_fault(step) after each step (test hooks ATTN_DP_TEST_HANG_STEP and
 * ATTN_DP_TEST_EXIT_STEP: rank 1 hangs or exits after that step), attn_cli_dp_finish(rc) after
 * the command (MPI_Finalize; returns rc, 1 when another rank failed). */
int attn_cli_dp_init(const char *cmd);
int attn_cli_dp_open(const char *cmd, attn_ctx *ctx, long long batch, const char *what,
                     const attn_train_dp **hooks);
void attn_cli_dp_expect_ready(const char *cmd);
void attn_cli_dp_note(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void attn_cli_dp_note_data(const char *name, const void *p, size_t n);
int attn_cli_dp_note_file(const char *cmd, const char *name, const char *path);
void attn_cli_dp_note_params(const char *name, const attn_module *m);
int attn_cli_dp_ready(const char *cmd, int ok);
int attn_cli_dp_fail(attn_ctx *ctx, const char *cmd, attn_status st);
void attn_cli_dp_fault(int64_t step);
int attn_cli_dp_finish(int rc);
int attn_cli_dp_rank(void);  /* 0 outside mpirun */
int attn_cli_dp_size(void);  /* 1 outside mpirun */
int attn_cli_dp_local(void); /* ranks on this node (1 outside mpirun) */
#ifdef ATTN_HAVE_MPI
/* common/train_dp.c: MPI_Init_thread (FUNNELED) unless MPI is already up, then this process's rank
 * and the world's size; 1 after printing the failure (cmd names the command), else 0. */
int attn_cli_mpi_init(const char *cmd, int *rank, int *size);
#endif

/* common/cli_util.c */
#include <stddef.h>
/* Prints "attn CMD: message (STATUS)" to stderr; returns 1. */
int attn_cli_fail(attn_ctx *ctx, const char *cmd, attn_status st);
/* The same line after TAG (NULL: none), e.g. "[rank 1 of 3] "; written to stderr at once. */
int attn_cli_fail_tagged(attn_ctx *ctx, const char *tag, const char *cmd, attn_status st);
/* Whole-string decimal parse within [lo, hi]; 1 on success. */
int attn_cli_parse_i64(const char *s, long long lo, long long hi, long long *v);
int attn_cli_parse_f(const char *s, double lo, double hi, double *v);
/* "m:ss" */
void attn_cli_fmt_time(double s, char *b, size_t n);

/* A training run's last validation value (for the summary; the chart is drawn from the log)
 * and the pacing of its progress lines. */
typedef struct attn_cli_curve {
    float val; /* the last validation value, when nv > 0 */
    int nv, tty;
    int quiet; /* -q: no progress lines */
    double last_print;
} attn_cli_curve;
void attn_cli_curve_init(attn_cli_curve *c, int quiet);
/* Records step p->step's validation value (when has_val) and says whether to print a progress
 * line now: at a validation, at the last step, or a second after the previous line. */
int attn_cli_curve_add(attn_cli_curve *c, const attn_train_progress *p, int has_val, float val);

/* A training command's output folder (created if missing; refused unless it is a directory
 * where a file can be created: checked before training, not at the first save) and its file
 * names.  Prints the problem and returns 1 on failure, else 0. */
typedef struct attn_cli_paths {
    char model[4096], state[4096], svg[4096], log[4096]; /* log: DIR/log.jsonl */
} attn_cli_paths;

/* The options every `attn train TASK` has (cli_util.c): --log FILE (the JSON-lines log;
 * default DIR/log.jsonl, '-' none), --accum N (gradient accumulation) and --save-every N
 * (checkpoints).  attn_cli_train_log: the log path these options give (NULL: none). */
typedef struct attn_cli_train_common {
    const char *log;
    long long accum, save_every;
    const char *tensorboard;
} attn_cli_train_common;
#define ATTN_OPT_TRAIN_COMMON(t, save_help)                                                   \
    ATTN_OPT_STR("log", 0, &(t)->log, "FILE",                                                 \
                 "one JSON object per step: loss, lr, grad norm, speed,\n"                    \
                 "evaluations (default DIR/log.jsonl; '-': none); DIR/loss.svg\n"             \
                 "draws it as 'attn plot' does (none without a log)"),                        \
    ATTN_OPT_INT("accum", 0, &(t)->accum, 1, 65536, "N",                                      \
                 "gradient accumulation: each step's batch in N parts,\n"                     \
                 "run one after another (the same step, less memory)"),                       \
    ATTN_OPT_INT("save-every", 0, &(t)->save_every, 0, 100000000, "N", save_help),          \
    ATTN_OPT_STR("tensorboard", 0, &(t)->tensorboard, "DIR",                                  \
                 "also write the log's scalars as TensorBoard events into\n"                  \
                 "DIR (made if missing): tensorboard --logdir DIR")
const char *attn_cli_train_log(const attn_cli_train_common *t, const attn_cli_paths *paths);
/* --tensorboard's directory, made if missing (NULL: none). */
const char *attn_cli_train_tb(const attn_cli_train_common *t);

/* SIGINT and SIGTERM during training (cli_util.c): the first asks the run to stop after the
 * step it is in, with a checkpoint (the progress callbacks return attn_cli_stop_requested());
 * a second one ends the process at once.  The previous checkpoint is intact either way. */
void attn_cli_stop_on_signals(void);
int attn_cli_stop_requested(void);
int attn_cli_train_dir(const char *cmd, const char *out, attn_cli_paths *paths);

/* --dtype of the training commands: auto (default: the precision attn picks for this CPU,
 * ATTN_CTX_AUTO_MATMUL), f32, or bf16 (products on bf16 operands with float sums).
 * attn_cli_ctx_dtype creates the context and turns *dtype into F32 or BF16 (auto resolved); an
 * explicit bf16 where this CPU multiplies bf16 slower than float gets a note on stderr unless
 * quiet.  attn_cli_dtype_resume: when the user left --dtype at auto, a resumed run takes the
 * precision of the run it continues (its "train.dtype"), so that it ends as that run would;
 * it sets the context and *dtype and returns 1 when that changed them. */
enum { ATTN_CLI_DTYPE_AUTO, ATTN_CLI_DTYPE_F32, ATTN_CLI_DTYPE_BF16 };
#define ATTN_CLI_DTYPE_CHOICES "auto|f32|bf16"
#define ATTN_CLI_DTYPE_HELP                                                                 \
    "the products' precision: auto (default: bf16 where this\n"                             \
    "CPU multiplies bf16 faster than float, i.e. AMX or AMD's\n"                            \
    "AVX512_BF16; else f32; attn info --cpu says which), f32\n"                             \
    "(all float), bf16 (the linear layers' products on bfloat16\n"                          \
    "operands with float sums)"
const char *attn_cli_dtype_name(int dtype);
int attn_cli_ctx_dtype(const char *cmd, long long threads, int quiet, int *dtype, attn_ctx **ctx);
int attn_cli_dtype_resume(attn_ctx *ctx, const attn_st *rs, int asked, int *dtype);
/* attn_cli_ctx_dtype, then attn_cli_dtype_resume with the checkpoint at resume (NULL: none; an
 * unreadable one is left for the task to report) (train dates, charlm). */
int attn_cli_ctx_dtype_resume(const char *cmd, long long threads, int quiet, const char *resume,
                              int *dtype, attn_ctx **ctx);


/* ---- options (common/cli_opt.c): one table-driven parser for every command ----------------
 * Long options "--name VALUE" or "--name=VALUE", short ones "-x VALUE", "-xVALUE" or bundled
 * flags "-qj"; options may come anywhere, "--" ends them, "-" alone is an argument (stdin or
 * stdout).  -h/--help is built in.  A table ends with an entry whose name is NULL. */
typedef enum attn_cli_kind {
    ATTN_CLI_FLAG,   /* int *: set to 1 (to lo where lo is not 0) */
    ATTN_CLI_STR,    /* const char **: the value */
    ATTN_CLI_INT,    /* long long *: a whole decimal number in [lo, hi] */
    ATTN_CLI_NUM,    /* double *: a number in [flo, fhi] */
    ATTN_CLI_CHOICE  /* int *: the index of the value in choices ("f32|f16|bf16") */
} attn_cli_kind;
typedef struct attn_cli_opt {
    const char *name;    /* long name without "--"; NULL ends the table */
    char shrt;           /* short letter, or 0 */
    attn_cli_kind kind;
    void *dst;
    const char *arg;     /* the value's name in the help ("N", "FILE") */
    const char *help;    /* NULL: an alias, not listed in the help */
    long long lo, hi;    /* ATTN_CLI_INT */
    double flo, fhi;     /* ATTN_CLI_NUM */
    const char *choices; /* ATTN_CLI_CHOICE */
} attn_cli_opt;
#define ATTN_OPT_FLAG(name, s, dst, help) {name, s, ATTN_CLI_FLAG, dst, NULL, help, 0, 0, 0, 0, NULL}
/* --mmap and --no-mmap, for every command that loads a GGUF model: an int at dst, 1 for
 * --mmap (ATTN_LLM_LOAD_MMAP), 2 for --no-mmap (the default, ATTN_LLM_LOAD_NO_MMAP) */
#define ATTN_OPT_MMAP(dst)                                                                   \
    {"mmap", 0, ATTN_CLI_FLAG, dst, NULL,                                                    \
     "map the GGUF file instead of reading it into memory:\n"                                \
     "loads faster and processes share the pages, but\n"                                     \
     "generation streams them through 4 KiB pages (slower),\n"                               \
     "and a file truncated while in use kills the process\n"                                 \
     "(SIGBUS), as in every memory-mapped reader", 1, 0, 0, 0, NULL},                        \
    {"no-mmap", 0, ATTN_CLI_FLAG, dst, NULL,                                                 \
     "read the GGUF file into memory (the default; kept for\n"                               \
     "scripts)", 2, 0, 0, 0, NULL}
/* --model and --act of the commands that load a language model (generate, chat, perplexity,
 * tokenize, bench --op llm) */
#define ATTN_CLI_LLM_MODEL_HELP                                                              \
    "a GGUF file (llama architecture) or a Hugging Face llama folder\n"                      \
    "(config.json, model.safetensors, tokenizer.json); required"
#define ATTN_OPT_ACT(dst)                                                                    \
    ATTN_OPT_CHOICE("act", 0, dst, "auto|f32|int8|int16", "P",                               \
                    "activations of the quantized products: auto (default:\n"                \
                    "int16 where the CPU has its kernels: decoding and\n"                   \
                    "prompts on x86 with AVX2; else f32), f32 (exact:\n"                     \
                    "the dequantized weights' product to float rounding),\n"                 \
                    "int16 (rounded to 2^-16 of each block of 32) or int8\n"                 \
                    "(llama.cpp's precision; decoding only)")
/* the loader flags of an ATTN_OPT_MMAP choice */
#define ATTN_CLI_MMAP_FLAGS(v)                                                               \
    ((v) == 1 ? ATTN_LLM_LOAD_MMAP : (v) == 2 ? ATTN_LLM_LOAD_NO_MMAP : 0u)
#define ATTN_OPT_STR(name, s, dst, arg, help) {name, s, ATTN_CLI_STR, dst, arg, help, 0, 0, 0, 0, NULL}
#define ATTN_OPT_INT(name, s, dst, lo, hi, arg, help)                                         \
    {name, s, ATTN_CLI_INT, dst, arg, help, lo, hi, 0, 0, NULL}
#define ATTN_OPT_NUM(name, s, dst, lo, hi, arg, help)                                         \
    {name, s, ATTN_CLI_NUM, dst, arg, help, 0, 0, lo, hi, NULL}
#define ATTN_OPT_CHOICE(name, s, dst, choices, arg, help)                                     \
    {name, s, ATTN_CLI_CHOICE, dst, arg, help, 0, 0, 0, 0, choices}
/* The same --threads everywhere: 0 (the default) = one per physical core this process may use
 * (attn_cpu_default_threads). */
#define ATTN_OPT_THREADS(dst)                                                                 \
    ATTN_OPT_INT("threads", 't', dst, 0, 1024, "N",                                           \
                 "worker threads (default 0: one per core this process may use)")
#define ATTN_OPT_END {NULL, 0, ATTN_CLI_FLAG, NULL, NULL, NULL, 0, 0, 0, 0, NULL}

/* A command's options and help.  usage: one or more lines, each a command line ("attn embed
 * --model DIR [options] [TEXT...]"); about: what it does; more: text after the options (may
 * be NULL); examples: command lines, one per line. */
typedef struct attn_cli_spec {
    const char *cmd; /* "embed", "train dates" */
    const char *usage, *about;
    const attn_cli_opt *opts;
    const char *more, *examples;
} attn_cli_spec;
#define ATTN_CLI_GO (-1)
/* Parses argv[1..argc) against spec.  Returns ATTN_CLI_GO with the other arguments moved, in
 * order, to argv[1..*npos]; 0 after printing the help (-h, --help) to stdout; 2 after printing
 * a usage error ("attn CMD: unknown option '--x'") to stderr. */
int attn_cli_parse(const attn_cli_spec *spec, int argc, char **argv, int *npos);
void attn_cli_help(const attn_cli_spec *spec, FILE *f);
/* Prints "attn CMD: MESSAGE", the usage lines and where the help is to stderr; returns 2. */
int attn_cli_usage_error(const attn_cli_spec *spec, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- contexts, input and output (common/cli_util.c, common/cli_io.c) ------------------------- */
/* threads as given by --threads: 0 becomes attn_cpu_default_threads() (one per physical core
 * this process may run on, within its cgroup's CPU quota). */
int attn_cli_threads(long long threads);
/* A context with attn_cli_threads(threads) threads and flags.  Prints the problem and returns
 * 1 on failure, else 0. */
int attn_cli_ctx(const char *cmd, long long threads, unsigned flags, attn_ctx **ctx);

/* ---- training logs as charts (common/plot.c) --------------------------------------------
 * Draws JSON-lines training logs (as `attn train TASK --log` writes them) as stacked panels
 * over a shared step or time axis: the training loss (light: as logged; dark: a trailing
 * mean), each eval_* metric, the throughput; several logs are several runs.  attn plot calls
 * it with its options; every attn train TASK draws its own log as DIR/loss.svg with it. */
#define ATTN_CLI_PLOT_LOSS 1
#define ATTN_CLI_PLOT_EVAL 2
#define ATTN_CLI_PLOT_THROUGHPUT 4
#define ATTN_CLI_PLOT_MAX_LABEL 100
typedef struct attn_cli_plot {
    const char *const *logs;   /* n paths ("-": standard input, once at most) */
    const char *const *labels; /* n legend names, or NULL: each file's name */
    int n;
    int x_time;       /* x: elapsed time (elapsed_s) instead of the step */
    int y;            /* the panels: ATTN_CLI_PLOT_* or-ed */
    long long smooth; /* the trailing mean's window (-1: a fiftieth of the lines; 0, 1: off) */
    int log_y, quiet; /* quiet: no notes about skipped or repeated lines, no "plot:" line */
    int csv;          /* also print the merged series as CSV on standard output */
    const char *title; /* NULL: "training: TASK" when the logs share one */
    const char *out;   /* the chart's file, "-" for standard output, or NULL (csv only) */
    int png;           /* PNG, else SVG */
} attn_cli_plot;
/* Prints "attn CMD: ..." on failure; returns the exit status (0, or 1). */
int attn_cli_plot_logs(const char *cmd, const attn_cli_plot *p);
/* A training run's chart (DIR/loss.svg): its log (a regular file, not empty) drawn as
 * attn plot LOG --y loss,eval draws it, so a resumed run's chart covers the whole run.
 * Returns 0 when drawn, -1 when there is no log to draw (none, '-', or not a regular file),
 * or 1 after printing the problem. */
int attn_cli_train_chart(const char *cmd, const char *log, const char *svg);

/* A language model with its tokenizer (attn_llm_load with flags; act: an attn_qact, from
 * ATTN_OPT_ACT).  Prints the problem and returns 0 on failure, else 1. */
int attn_cli_llm_load(const char *cmd, attn_ctx *ctx, const char *path, unsigned flags, int act,
                      attn_llm **m);

/* Reads a whole text: a regular file (sized with fstat and refused past max before it is
 * read), "-" (standard input) or a FIFO/pipe (read as a stream, refused once past max; a FIFO
 * is opened without blocking, so one with no writer reads as empty instead of hanging).
 * Directories, devices and sockets are refused by type.  limit_name names the bound in the
 * messages ("ATTN_LIMIT_TEXT_BYTES").  *data is NUL-terminated (free() it), *len its length.
 * Prints "attn CMD: PATH: ..." and returns 0 on failure, else 1. */
int attn_cli_read_all(const char *cmd, const char *path, int64_t max, const char *limit_name,
                      char **data, size_t *len);
/* Reads a safetensors image from standard input.  A regular file is read as by
 * attn_cli_read_all; a stream is read no further than its 8-byte header length, its header
 * and the data its tensors' data_offsets describe (so an endless stream ends there), and
 * refused when that is over max.  Prints "attn CMD: ..." and returns 0 on failure, else 1; a
 * short or malformed image is returned as read, for the parser to describe. */
int attn_cli_read_st_stdin(const char *cmd, int64_t max, const char *limit_name, char **data,
                           size_t *len);
/* The bound on a text the CLI reads: the context's ATTN_LIMIT_TEXT_BYTES, or the environment
 * variable ATTN_MAX_TEXT_BYTES where it is lower (read by the CLI only, for tests and cautious
 * callers); *name names the one in force.  Prints the problem and returns 0 when
 * ATTN_MAX_TEXT_BYTES is not a positive integer, else 1. */
int attn_cli_text_bound(const char *cmd, attn_ctx *ctx, int64_t *max, const char **name);
/* attn_cli_read_all bounded by attn_cli_text_bound. */
int attn_cli_read_text(const char *cmd, attn_ctx *ctx, const char *path, char **data,
                       size_t *len);
/* --template FILE of attn chat, generate and serve: reads FILE (attn_cli_read_text) and makes
 * it m's chat template (attn_llm_set_chat_template).  A template attn does not recognise is
 * refused: "attn CMD: FILE: not a chat template attn formats (its first line: ...): why".
 * Prints the problem and returns 0 on failure, else 1. */
int attn_cli_chat_template(const char *cmd, attn_ctx *ctx, attn_llm *m, const char *path);
/* fwrite to stdout, remembering why it failed for attn_cli_close_stdout. */
size_t attn_cli_write_stdout(const void *p, size_t n);
/* Writes s with bytes below 0x20, 0x7f and bytes of invalid UTF-8 as \xNN (text from a file
 * cannot move the cursor, forge a line or switch the terminal's mode).  Returns the bytes
 * written. */
size_t attn_cli_put_escaped(FILE *f, const char *s);
/* Run by main after a command: fflush and fclose stdout; on a write error (now or earlier:
 * ferror) prints "attn CMD: error writing to standard output: REASON" and returns 1 if rc was
 * 0; otherwise returns rc. */
int attn_cli_close_stdout(const char *cmd, int rc);
/* Makes sure descriptors 0, 1 and 2 are open (a closed one gets /dev/null opened the other way,
 * so using it still fails), so that no file the program opens lands on them. */
void attn_cli_guard_fds(void);

#endif
