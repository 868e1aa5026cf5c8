/* Pictures of the attn program: an attention heatmap and panels (PNG) and line charts (SVG or
 * PNG: attn plot and each training run's loss.svg, common/plot.c), written without
 * dependencies.  They belong to the CLI, not to the library's ABI: the
 * library hands out numbers (attention weights, losses) and the CLI draws them.  Like the
 * library they never print: a failure is an attn_status with the message in ctx (attn_cli_fail
 * prints it).  draw.h has the parts (PNG encoder, canvas, font, charts). */
#ifndef ATTN_CLI_PICTURES_H
#define ATTN_CLI_PICTURES_H
#include "attn.h"

/* rgb [height, width, 3] 8-bit pixels to a PNG file (deflate-compressed). */
attn_status attn_cli_png_write(attn_ctx *ctx, const char *path, int width, int height,
                               const unsigned char *rgb);
/* A heatmap of weights [rows, cols] (e.g. attention weights: rows = queries, columns = keys)
 * with a perceptual colour map, row labels on the left, column labels on top (spaces drawn
 * as a dot), a colour bar and an optional title (NULL: none), as a PNG file. */
attn_status attn_cli_heatmap_png(attn_ctx *ctx, const char *path, const float *weights,
                                 int rows, int cols, const char *const *row_labels,
                                 const char *const *col_labels, const char *title);
/* One panel of attn_cli_panels_png: values [rows, cols] (row-major) drawn as a square of
 * size x size pixels (nearest neighbour), in grey (gray = 1: lo black, hi white) or with the
 * colour map (gray = 0); lo >= hi takes the panel's own minimum and maximum.  label (above)
 * and note (below) may be NULL; both are cut to the panel's width. */
typedef struct attn_cli_panel {
    const float *values;
    int rows, cols;
    int gray;
    float lo, hi;
    const char *label, *note;
} attn_cli_panel;
/* A row of n (1..64) panels, each size (8..1024) pixels square, under an optional title
 * (NULL: none), as a PNG file. */
attn_status attn_cli_panels_png(attn_ctx *ctx, const char *path, const attn_cli_panel *panels,
                                int n, int size, const char *title);

/* ---- line charts (chart.c) -------------------------------------------------------------
 * One or more panels stacked vertically, sharing the x axis (its range spans every panel's
 * data), each with its own y axis; a legend row under the title lists every labelled series
 * once (by label and colour).  Non-finite points (and y <= 0 on a logarithmic axis) are left
 * out and break the line.  The same layout is written as SVG or drawn as a PNG (twice the
 * size, the built-in bitmap font). */
typedef struct attn_cli_series {
    const char *label;   /* legend entry (NULL or "": none) */
    const double *x, *y; /* n points */
    int n;
    unsigned rgb;        /* colour 0xRRGGBB */
    float width;         /* line width (0: 1.6) */
    int markers;         /* a dot at each point (drawn when there are at most 1000) */
} attn_cli_series;
typedef struct attn_cli_chart_panel {
    const char *ylabel;  /* the y axis title, turned (NULL: none) */
    const char *caption; /* bold, above the panel on the left (NULL: none) */
    const char *note;    /* small and grey, above the panel on the right (NULL: none) */
    const attn_cli_series *series;
    int nseries;         /* 0..256 */
    int log_y;           /* logarithmic y axis (decades) */
    int zero_y;          /* start a linear y axis at 0 when the minimum is near it */
    int ticks;           /* about how many y ticks (0: 6) */
} attn_cli_chart_panel;
typedef struct attn_cli_chart {
    const char *title;   /* NULL: none */
    const char *xlabel;  /* under the last panel (NULL: none) */
    const attn_cli_chart_panel *panels;
    int npanels;         /* 1..16 */
    int width;           /* 0: 900 (SVG units; the PNG has twice as many pixels) */
    int panel_height;    /* height of each plot area (0: 280) */
} attn_cli_chart;
/* Writes the chart to path: PNG when png, else SVG. */
attn_status attn_cli_chart_write(attn_ctx *ctx, const char *path, int png,
                                 const attn_cli_chart *chart);

#endif
