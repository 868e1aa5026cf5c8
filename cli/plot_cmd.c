/* attn plot: training logs as charts in SVG or PNG, or the merged series as CSV; the options,
 * then attn_cli_plot_logs (common/plot.c, which also draws each training run's loss.svg). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#define PLOT_MAX_LOGS 32

static int has_ext(const char *path, const char *ext) {
    size_t n = strlen(path), k = strlen(ext);
    if (n <= k) return 0;
    for (size_t i = 0; i < k; i++) {
        char c = path[n - k + i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != ext[i]) return 0;
    }
    return 1;
}

enum { F_AUTO, F_SVG, F_PNG };

int attn_cmd_plot(int argc, char **argv) {
    const char *out = NULL, *title = NULL, *labels = NULL;
    int xsel = 0, ysel = 3, log_y = 0, csv = 0, fmt = F_AUTO, quiet = 0, npos;
    long long smooth_n = -1;
    const attn_cli_opt opts[] = {
        ATTN_OPT_STR("output", 'o', &out, "OUT",
                     "the chart: OUT.svg or OUT.png ('-': standard output,\n"
                     "with --format)"),
        ATTN_OPT_CHOICE("x", 0, &xsel, "step|time", "WHAT",
                        "the x axis: step (default) or time (elapsed_s)"),
        ATTN_OPT_CHOICE("y", 0, &ysel, "loss|eval|throughput|all", "WHAT",
                        "the panels: loss (training loss), eval (one per eval_*\n"
                        "key), throughput (items_per_s), or all (default: each\n"
                        "that the logs have), stacked"),
        ATTN_OPT_INT("smooth", 0, &smooth_n, 0, 100000000, "N",
                     "draw the training loss also as the mean of the last N\n"
                     "logged values (default: a fiftieth of the log's lines;\n"
                     "0 or 1: off)"),
        ATTN_OPT_FLAG("log-y", 0, &log_y, "a logarithmic axis for the training loss"),
        ATTN_OPT_STR("title", 0, &title, "TEXT",
                     "the chart's title (default: the logs' task, if one)"),
        ATTN_OPT_STR("labels", 0, &labels, "A,B,...",
                     "legend names, one per LOG (default: each file's\n"
                     "name without folder and extension)"),
        ATTN_OPT_CHOICE("format", 0, &fmt, "auto|svg|png", "FMT",
                        "svg or png (default auto: from OUT's extension)"),
        ATTN_OPT_FLAG("csv", 0, &csv,
                      "print the merged series as CSV to standard output (a\n"
                      "first column run with several logs)"),
        ATTN_OPT_FLAG("quiet", 'q', &quiet, "no notes about skipped or repeated lines"),
        ATTN_OPT_END};
    const attn_cli_spec spec = {
        "plot", "attn plot [options] LOG [LOG...] -o OUT.svg|OUT.png\nattn plot --csv LOG [LOG...]",
        "Draws training logs (JSON Lines, one object per line, as training runs write\n"
        "them) as line charts: the training loss (with a trailing mean), each eval_*\n"
        "metric and the throughput, in panels stacked over a shared step or time axis;\n"
        "several logs are several runs, each in its own colour.",
        opts,
        "A line counts when it is a JSON object with a numeric \"step\"; the keys read are\n"
        "elapsed_s, loss, lr, grad_norm, items_per_s, unit, task and every eval_* number;\n"
        "others, and lines that are not objects, are ignored.  A step logged twice (a\n"
        "resumed run) is taken from its later line.  NaN, Infinity and null are missing\n"
        "values (not drawn).  A log may have at most 1 GiB and 10 million lines; a line\n"
        "over 64 KiB is skipped.",
        "attn plot run.jsonl -o curves.svg\n"
        "attn plot base.jsonl wide.jsonl --labels base,wide --y loss --log-y -o loss.png\n"
        "attn plot run.jsonl --x time --y throughput -o speed.svg\n"
        "attn plot run.jsonl --csv > run.csv"};
    int r = attn_cli_parse(&spec, argc, argv, &npos);
    if (r != ATTN_CLI_GO) return r;
    if (npos < 1) return attn_cli_usage_error(&spec, "no LOG to plot");
    if (npos > PLOT_MAX_LOGS)
        return attn_cli_usage_error(&spec, "%d logs; at most %d", npos, PLOT_MAX_LOGS);
    if (!out && !csv)
        return attn_cli_usage_error(&spec, "-o OUT.svg or OUT.png (or --csv) is required");
    int png = 0;
    if (out) {
        int to_stdout = !strcmp(out, "-");
        if (fmt == F_AUTO) {
            if (to_stdout)
                return attn_cli_usage_error(&spec, "-o - needs --format svg or --format png");
            if (has_ext(out, ".svg")) fmt = F_SVG;
            else if (has_ext(out, ".png")) fmt = F_PNG;
            else
                return attn_cli_usage_error(&spec,
                                            "-o %s: the output must end in .svg or .png "
                                            "(or give --format svg|png)",
                                            out);
        }
        png = fmt == F_PNG;
        if (to_stdout && csv)
            return attn_cli_usage_error(&spec, "--csv and -o - both write to standard output");
    }
    int nstdin = 0;
    for (int i = 1; i <= npos; i++) nstdin += !strcmp(argv[i], "-");
    if (nstdin > 1) return attn_cli_usage_error(&spec, "'-' (standard input) given twice");

    const int ymask[4] = {ATTN_CLI_PLOT_LOSS, ATTN_CLI_PLOT_EVAL, ATTN_CLI_PLOT_THROUGHPUT,
                          ATTN_CLI_PLOT_LOSS | ATTN_CLI_PLOT_EVAL | ATTN_CLI_PLOT_THROUGHPUT};
    /* --labels A,B,...: one name per log, each cut to ATTN_CLI_PLOT_MAX_LABEL bytes */
    char(*names)[ATTN_CLI_PLOT_MAX_LABEL + 1] = NULL;
    const char *lp[PLOT_MAX_LOGS];
    if (labels) {
        if (!(names = calloc((size_t)npos, sizeof *names))) {
            fprintf(stderr, "attn plot: out of memory\n");
            return 1;
        }
        int k = 0;
        const char *s = labels;
        for (;;) {
            const char *c = strchr(s, ',');
            size_t n = c ? (size_t)(c - s) : strlen(s);
            if (k < npos) {
                if (n > ATTN_CLI_PLOT_MAX_LABEL) n = ATTN_CLI_PLOT_MAX_LABEL;
                memcpy(names[k], s, n);
                names[k][n] = 0;
                lp[k] = names[k];
            }
            k++;
            if (!c) break;
            s = c + 1;
        }
        if (k != npos) {
            free(names);
            return attn_cli_usage_error(&spec, "--labels has %d name%s for %d log%s", k,
                                        k == 1 ? "" : "s", npos, npos == 1 ? "" : "s");
        }
    }
    const attn_cli_plot p = {(const char *const *)(argv + 1), labels ? lp : NULL, npos,
                             xsel == 1, ymask[ysel], smooth_n, log_y, quiet, csv, title, out,
                             png};
    r = attn_cli_plot_logs("plot", &p);
    free(names);
    return r;
}
