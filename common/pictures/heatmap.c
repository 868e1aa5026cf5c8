/* Raster drawing for the pictures: a 5x9 bitmap font of our own design (printable ASCII and a
 * centred dot that shows spaces), an RGB canvas, a viridis-like colour map, and the attention
 * heatmap. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "draw.h"

/* ---- font ------------------------------------------------------------------------------ */
/* One glyph = 9 rows of 5 bits, bit 4 the leftmost column.  Rows 0..6 hold capitals and digits
 * (row 6 is the baseline row), lower case has its x-height on rows 2..6, and rows 7..8 hold
 * descenders (g j p q y , ; _ |).  Index = code - 32 for 32..126; the last entry is the
 * centred dot drawn for spaces in labels. */
static const unsigned char font5x9[96][ATTN_CLI_FONT_H] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /*   */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00}, /* ! */
    {0x0a, 0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* " */
    {0x0a, 0x0a, 0x1f, 0x0a, 0x1f, 0x0a, 0x0a, 0x00, 0x00}, /* # */
    {0x04, 0x0f, 0x14, 0x0e, 0x05, 0x1e, 0x04, 0x00, 0x00}, /* $ */
    {0x19, 0x19, 0x02, 0x04, 0x08, 0x13, 0x13, 0x00, 0x00}, /* % */
    {0x0c, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0d, 0x00, 0x00}, /* & */
    {0x04, 0x04, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* quote */
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00}, /* ( */
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00}, /* ) */
    {0x00, 0x04, 0x15, 0x0e, 0x15, 0x04, 0x00, 0x00, 0x00}, /* '*' */
    {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00, 0x00, 0x00}, /* + */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c, 0x04, 0x08}, /* , */
    {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00, 0x00}, /* - */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c, 0x00, 0x00}, /* . */
    {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10, 0x00, 0x00}, /* '/' */
    {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e, 0x00, 0x00}, /* 0 */
    {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* 1 */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f, 0x00, 0x00}, /* 2 */
    {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e, 0x00, 0x00}, /* 3 */
    {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02, 0x00, 0x00}, /* 4 */
    {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e, 0x00, 0x00}, /* 5 */
    {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* 6 */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00}, /* 7 */
    {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* 8 */
    {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c, 0x00, 0x00}, /* 9 */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00, 0x00, 0x00}, /* : */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x04, 0x08, 0x00}, /* ; */
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00}, /* < */
    {0x00, 0x00, 0x1f, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00}, /* = */
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00}, /* > */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00}, /* ? */
    {0x0e, 0x11, 0x17, 0x15, 0x17, 0x10, 0x0e, 0x00, 0x00}, /* @ */
    {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11, 0x00, 0x00}, /* A */
    {0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e, 0x00, 0x00}, /* B */
    {0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e, 0x00, 0x00}, /* C */
    {0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c, 0x00, 0x00}, /* D */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f, 0x00, 0x00}, /* E */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10, 0x00, 0x00}, /* F */
    {0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f, 0x00, 0x00}, /* G */
    {0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11, 0x00, 0x00}, /* H */
    {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* I */
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c, 0x00, 0x00}, /* J */
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00}, /* K */
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f, 0x00, 0x00}, /* L */
    {0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00}, /* M */
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00}, /* N */
    {0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* O */
    {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10, 0x00, 0x00}, /* P */
    {0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d, 0x00, 0x00}, /* Q */
    {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11, 0x00, 0x00}, /* R */
    {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e, 0x00, 0x00}, /* S */
    {0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00}, /* T */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* U */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04, 0x00, 0x00}, /* V */
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a, 0x00, 0x00}, /* W */
    {0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11, 0x00, 0x00}, /* X */
    {0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00}, /* Y */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f, 0x00, 0x00}, /* Z */
    {0x0e, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0e, 0x00, 0x00}, /* [ */
    {0x10, 0x10, 0x08, 0x04, 0x02, 0x01, 0x01, 0x00, 0x00}, /* backslash */
    {0x0e, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0e, 0x00, 0x00}, /* ] */
    {0x04, 0x0a, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ^ */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f, 0x00}, /* _ */
    {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ` */
    {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f, 0x00, 0x00}, /* a */
    {0x10, 0x10, 0x1e, 0x11, 0x11, 0x11, 0x1e, 0x00, 0x00}, /* b */
    {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e, 0x00, 0x00}, /* c */
    {0x01, 0x01, 0x0f, 0x11, 0x11, 0x11, 0x0f, 0x00, 0x00}, /* d */
    {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e, 0x00, 0x00}, /* e */
    {0x06, 0x08, 0x1e, 0x08, 0x08, 0x08, 0x08, 0x00, 0x00}, /* f */
    {0x00, 0x00, 0x0f, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x0e}, /* g */
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00}, /* h */
    {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* i */
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c}, /* j */
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00}, /* k */
    {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* l */
    {0x00, 0x00, 0x1a, 0x15, 0x15, 0x15, 0x15, 0x00, 0x00}, /* m */
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00}, /* n */
    {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* o */
    {0x00, 0x00, 0x1e, 0x11, 0x11, 0x11, 0x1e, 0x10, 0x10}, /* p */
    {0x00, 0x00, 0x0f, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x01}, /* q */
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00}, /* r */
    {0x00, 0x00, 0x0f, 0x10, 0x0e, 0x01, 0x1e, 0x00, 0x00}, /* s */
    {0x08, 0x08, 0x1e, 0x08, 0x08, 0x09, 0x06, 0x00, 0x00}, /* t */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d, 0x00, 0x00}, /* u */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04, 0x00, 0x00}, /* v */
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a, 0x00, 0x00}, /* w */
    {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x00, 0x00}, /* x */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x0e}, /* y */
    {0x00, 0x00, 0x1f, 0x02, 0x04, 0x08, 0x1f, 0x00, 0x00}, /* z */
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03, 0x00, 0x00}, /* { */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00}, /* | */
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18, 0x00, 0x00}, /* } */
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00}, /* ~ */
    {0x00, 0x00, 0x0e, 0x0e, 0x0e, 0x00, 0x00, 0x00, 0x00}, /* centred dot (space) */
};

const unsigned char *attn_cli_font_glyph(int c) {
    if (c == ATTN_CLI_GLYPH_SPACE_DOT) return font5x9[95];
    if (c < 32 || c > 126) c = '?';
    return font5x9[c - 32];
}

/* ---- canvas ---------------------------------------------------------------------------- */
void attn_cli_fill_rect(attn_cli_canvas *cv, int x, int y, int w, int h,
                        const unsigned char rgb[3]) {
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
    int x1 = x + w > cv->w ? cv->w : x + w, y1 = y + h > cv->h ? cv->h : y + h;
    for (int yy = y0; yy < y1; yy++)
        for (int xx = x0; xx < x1; xx++) {
            unsigned char *p = cv->px + ((size_t)yy * (size_t)cv->w + (size_t)xx) * 3;
            p[0] = rgb[0];
            p[1] = rgb[1];
            p[2] = rgb[2];
        }
}

int attn_cli_text_width(const char *s, int scale) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0) return 0;
    if (n > 4096) n = 4096;
    return ((int)n * ATTN_CLI_FONT_ADV - 1) * scale;
}

void attn_cli_draw_text(attn_cli_canvas *cv, int x, int y, const char *s, int scale, int vertical,
                        int show_space, const unsigned char rgb[3]) {
    if (!s || scale <= 0) return;
    int pen = 0; /* unscaled advance along the text */
    for (size_t i = 0; s[i] && i < 4096; i++, pen += ATTN_CLI_FONT_ADV) {
        int c = (unsigned char)s[i];
        if (c == ' ' && show_space) c = ATTN_CLI_GLYPH_SPACE_DOT;
        const unsigned char *g = attn_cli_font_glyph(c);
        for (int gy = 0; gy < ATTN_CLI_FONT_H; gy++)
            for (int gx = 0; gx < ATTN_CLI_FONT_W; gx++) {
                if (!((g[gy] >> (ATTN_CLI_FONT_W - 1 - gx)) & 1)) continue;
                int u = pen + gx; /* along the text */
                if (!vertical)
                    attn_cli_fill_rect(cv, x + u * scale, y + gy * scale, scale, scale, rgb);
                else /* 90 degrees counter-clockwise: along = up, glyph rows = right */
                    attn_cli_fill_rect(cv, x + gy * scale, y - (u + 1) * scale, scale, scale, rgb);
            }
    }
}

/* ---- colour map ------------------------------------------------------------------------ */
/* Nine evenly spaced samples of viridis (dark blue-violet -> teal -> green -> yellow): its
 * lightness rises monotonically, so the order of values reads in grey too. */
static const unsigned char viridis9[9][3] = {
    {68, 1, 84},    {71, 44, 122},  {59, 81, 139},  {44, 113, 142}, {33, 144, 141},
    {39, 173, 129}, {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};

void attn_cli_colormap(float t, unsigned char rgb[3]) {
    if (!(t > 0.0f)) t = 0.0f; /* NaN too */
    if (t > 1.0f) t = 1.0f;
    float f = t * 8.0f;
    int i = (int)f;
    if (i > 7) i = 7;
    float a = f - (float)i;
    for (int k = 0; k < 3; k++) {
        float v = (1.0f - a) * viridis9[i][k] + a * viridis9[i + 1][k];
        rgb[k] = (unsigned char)(v + 0.5f);
    }
}

/* ---- heatmap --------------------------------------------------------------------------- */
#define HM_MAX_DIM 1024      /* rows or columns */
#define HM_LABEL_MAX 24      /* characters shown of a label */
#define HM_TITLE_MAX 160     /* characters shown of the title */

static const unsigned char C_BG[3] = {255, 255, 255};
static const unsigned char C_TEXT[3] = {34, 34, 34};
static const unsigned char C_DIM[3] = {110, 110, 110};
static const unsigned char C_GRID[3] = {255, 255, 255};
static const unsigned char C_FRAME[3] = {160, 160, 160};

/* A label clipped to HM_LABEL_MAX characters ("" for NULL). */
static void clip_label(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    if (s)
        for (; s[n] && n < cap - 1; n++) buf[n] = s[n];
    buf[n] = 0;
}

static int max_label_len(const char *const *labels, int n) {
    int m = 0;
    if (!labels) return 0;
    for (int i = 0; i < n; i++) {
        int l = labels[i] ? (int)strlen(labels[i]) : 0;
        if (l > HM_LABEL_MAX) l = HM_LABEL_MAX;
        if (l > m) m = l;
    }
    return m;
}

/* "%.3g" without a trailing exponent mess for tick labels. */
static void fmt_tick(double v, char *buf, size_t n) {
    if (fabs(v) < 1e-12) v = 0;
    snprintf(buf, n, "%.3g", v);
}

attn_status attn_cli_heatmap_render(attn_ctx *ctx, const float *weights, int rows, int cols,
                                    const char *const *row_labels, const char *const *col_labels,
                                    const char *title, attn_cli_canvas *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "heatmap: output is NULL");
    memset(out, 0, sizeof *out);
    ATTN_FAIL_IF(!weights, ctx, ATTN_E_INVALID, "heatmap: weights are NULL");
    ATTN_FAIL_IF(rows <= 0 || cols <= 0 || rows > HM_MAX_DIM || cols > HM_MAX_DIM, ctx,
                 ATTN_E_INVALID, "heatmap: %d x %d weights; rows and columns must be in 1..%d",
                 rows, cols, HM_MAX_DIM);
    size_t count = (size_t)rows * (size_t)cols;
    float lo = weights[0], hi = weights[0];
    for (size_t i = 0; i < count; i++) {
        float v = weights[i];
        if (!isfinite(v))
            return attn__fail(ctx, ATTN_E_NONFINITE, "heatmap: weight [%zu, %zu] is not finite",
                              i / (size_t)cols, i % (size_t)cols);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    /* attention weights (all in [0, 1]) use the fixed range 0..1; anything else its own */
    double vmin = lo, vmax = hi;
    if (lo >= 0.0f && hi <= 1.0f) {
        vmin = 0;
        vmax = 1;
    }

    /* cell size: large enough for a scale-2 character up to 64 cells, then smaller */
    int big = rows > cols ? rows : cols;
    int cell = big <= 64 ? 22 : big <= 128 ? 12 : big <= 256 ? 6 : 3;
    int gap = cell >= 12 ? 1 : 0;
    int ls = cell >= 20 ? 2 : 1;          /* label scale */
    int show_labels = cell >= 12;
    const int ts = 2;                     /* title and legend scale */
    const int pad = 16;
    const int line = ATTN_CLI_FONT_LINE;

    /* row labels: right-aligned left of the grid */
    int rl_len = show_labels ? max_label_len(row_labels, rows) : 0;
    int rl_w = rl_len ? (rl_len * ATTN_CLI_FONT_ADV - 1) * ls + 8 : 0;
    /* column labels: upright when all are single characters, else turned */
    int cl_len = show_labels ? max_label_len(col_labels, cols) : 0;
    int cl_vertical = cl_len > 1;
    int cl_h = cl_len == 0 ? 0 : cl_vertical ? (cl_len * ATTN_CLI_FONT_ADV - 1) * ls + 6
                                             : ATTN_CLI_FONT_H * ls + 4;

    char tbuf[HM_TITLE_MAX + 1];
    clip_label(title, tbuf, sizeof tbuf);
    int title_w = attn_cli_text_width(tbuf, ts);
    int title_h = tbuf[0] ? line * ts + 10 : 0;

    int grid_w = cols * cell, grid_h = rows * cell;
    int bar_h = grid_h > 120 ? grid_h : 120, bar_w = 14;
    /* colour-bar ticks: labels right of the bar */
    char ticks[5][32];
    int tick_w = 0;
    for (int k = 0; k < 5; k++) {
        fmt_tick(vmin + (vmax - vmin) * k / 4.0, ticks[k], sizeof ticks[k]);
        int w = attn_cli_text_width(ticks[k], ts);
        if (w > tick_w) tick_w = w;
    }
    int legend_w = 18 + bar_w + 9 + tick_w;

    int gx = pad + rl_w, gy = pad + title_h + cl_h; /* grid top-left */
    int body_w = gx + grid_w + legend_w + pad;
    int W = body_w > title_w + 2 * pad ? body_w : title_w + 2 * pad;
    int body_h = grid_h > bar_h ? grid_h : bar_h;
    /* half a line of room for the top and bottom tick labels, which are centred on the ends */
    int H = gy + body_h + pad + (line * ts) / 2;

    size_t npx, nbytes;
    if (!attn__mul_size((size_t)W, (size_t)H, &npx) || !attn__mul_size(npx, 3, &nbytes))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "heatmap: %d x %d picture overflows", W, H);
    unsigned char *px = attn__malloc(ctx, nbytes);
    if (!px) return attn__fail(ctx, ATTN_E_NOMEM, "heatmap: out of memory (%zu bytes)", nbytes);
    attn_cli_canvas cv = {W, H, px};
    attn_cli_fill_rect(&cv, 0, 0, W, H, C_BG);

    if (tbuf[0]) attn_cli_draw_text(&cv, (W - title_w) / 2, pad, tbuf, ts, 0, 0, C_TEXT);

    /* cells */
    double span = vmax - vmin;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double v = weights[(size_t)r * (size_t)cols + (size_t)c];
            float t = span > 0 ? (float)((v - vmin) / span) : 0.5f;
            unsigned char rgb[3];
            attn_cli_colormap(t, rgb);
            attn_cli_fill_rect(&cv, gx + c * cell, gy + r * cell, cell, cell, rgb);
        }
    if (gap) {
        for (int r = 1; r < rows; r++)
            attn_cli_fill_rect(&cv, gx, gy + r * cell, grid_w, gap, C_GRID);
        for (int c = 1; c < cols; c++)
            attn_cli_fill_rect(&cv, gx + c * cell, gy, gap, grid_h, C_GRID);
    }

    /* labels (capitals span 7 font rows: centre those on the cell) */
    char lb[HM_LABEL_MAX + 1];
    if (rl_len)
        for (int r = 0; r < rows; r++) {
            clip_label(row_labels[r], lb, sizeof lb);
            int w = attn_cli_text_width(lb, ls);
            int y = gy + r * cell + (cell - 7 * ls) / 2;
            attn_cli_draw_text(&cv, gx - 8 - w, y, lb, ls, 0, 1, C_TEXT);
        }
    if (cl_len)
        for (int c = 0; c < cols; c++) {
            clip_label(col_labels[c], lb, sizeof lb);
            if (!cl_vertical) {
                int w = attn_cli_text_width(lb, ls);
                attn_cli_draw_text(&cv, gx + c * cell + (cell - w) / 2 + (gap ? 1 : 0),
                                   gy - 4 - 7 * ls, lb, ls, 0, 1, C_TEXT);
            } else {
                int x = gx + c * cell + (cell - 7 * ls) / 2;
                attn_cli_draw_text(&cv, x, gy - 6, lb, ls, 1, 1, C_TEXT);
            }
        }

    /* colour bar: top = vmax */
    int bx = gx + grid_w + 18, by = gy;
    for (int y = 0; y < bar_h; y++) {
        unsigned char rgb[3];
        attn_cli_colormap(1.0f - (float)y / (float)(bar_h - 1), rgb);
        attn_cli_fill_rect(&cv, bx, by + y, bar_w, 1, rgb);
    }
    attn_cli_fill_rect(&cv, bx - 1, by - 1, bar_w + 2, 1, C_FRAME);
    attn_cli_fill_rect(&cv, bx - 1, by + bar_h, bar_w + 2, 1, C_FRAME);
    attn_cli_fill_rect(&cv, bx - 1, by - 1, 1, bar_h + 2, C_FRAME);
    attn_cli_fill_rect(&cv, bx + bar_w, by - 1, 1, bar_h + 2, C_FRAME);
    for (int k = 0; k < 5; k++) {
        int y = by + (bar_h - 1) - (bar_h - 1) * k / 4;
        attn_cli_fill_rect(&cv, bx + bar_w, y, 4, 1, C_DIM);
        attn_cli_draw_text(&cv, bx + bar_w + 9, y - (7 * ts) / 2, ticks[k], ts, 0, 0, C_TEXT);
    }
    *out = cv;
    return ATTN_OK;
}

attn_status attn_cli_heatmap_png(attn_ctx *ctx, const char *path, const float *weights, int rows,
                                 int cols, const char *const *row_labels,
                                 const char *const *col_labels, const char *title) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "heatmap: output path is NULL or empty");
    attn_cli_canvas cv;
    ATTN_TRY(attn_cli_heatmap_render(ctx, weights, rows, cols, row_labels, col_labels, title, &cv));
    attn_status st = attn_cli_png_write(ctx, path, cv.w, cv.h, cv.px);
    attn__free(ctx, cv.px);
    return st;
}
