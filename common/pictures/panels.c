/* A row of labelled square panels as one picture (attn attention-map: an image beside its
 * attention maps).  Each panel is a small grid of values drawn with nearest-neighbour scaling,
 * in grey or with the colour map, with a label above and a note below. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "draw.h"

#define PN_MAX 64       /* panels */
#define PN_MAX_GRID 1024 /* rows or columns of a panel's values */
#define PN_MAX_SIZE 1024 /* panel side in pixels */
#define PN_TITLE_MAX 200 /* characters shown of the title */

static const unsigned char C_BG[3] = {255, 255, 255};
static const unsigned char C_TEXT[3] = {34, 34, 34};
static const unsigned char C_DIM[3] = {110, 110, 110};
static const unsigned char C_FRAME[3] = {160, 160, 160};

/* s cut to at most max characters into buf (cap > max). */
static void cut(const char *s, int max, char *buf, size_t cap) {
    size_t n = 0;
    if (s)
        for (; s[n] && n < cap - 1 && (int)n < max; n++) buf[n] = s[n];
    buf[n] = 0;
}

attn_status attn_cli_panels_render(attn_ctx *ctx, const attn_cli_panel *panels, int n, int size,
                                   const char *title, attn_cli_canvas *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "panels: output is NULL");
    out->px = NULL;
    ATTN_FAIL_IF(!panels || n < 1 || n > PN_MAX, ctx, ATTN_E_INVALID,
                 "panels: %d panels; there must be 1..%d", n, PN_MAX);
    ATTN_FAIL_IF(size < 8 || size > PN_MAX_SIZE, ctx, ATTN_E_INVALID,
                 "panels: size %d must be in 8..%d pixels", size, PN_MAX_SIZE);
    for (int i = 0; i < n; i++) {
        const attn_cli_panel *p = &panels[i];
        ATTN_FAIL_IF(!p->values, ctx, ATTN_E_INVALID, "panels: panel %d has no values", i);
        ATTN_FAIL_IF(p->rows < 1 || p->cols < 1 || p->rows > PN_MAX_GRID ||
                         p->cols > PN_MAX_GRID,
                     ctx, ATTN_E_INVALID, "panels: panel %d is %d x %d; sides must be in 1..%d", i,
                     p->rows, p->cols, PN_MAX_GRID);
        for (int k = 0; k < p->rows * p->cols; k++)
            ATTN_FAIL_IF(!isfinite(p->values[k]), ctx, ATTN_E_NONFINITE,
                         "panels: panel %d value %d is not finite", i, k);
    }
    const int margin = 12, gap = 12, line = ATTN_CLI_FONT_LINE;
    int title_h = title && title[0] ? line + 8 : 0;
    int W = 2 * margin + n * size + (n - 1) * gap;
    int H = margin + title_h + line + 4 + size + 4 + line + margin;
    size_t npx, nbytes;
    if (!attn__mul_size((size_t)W, (size_t)H, &npx) || !attn__mul_size(npx, 3, &nbytes))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "panels: %d x %d picture overflows", W, H);
    unsigned char *px = attn__malloc(ctx, nbytes);
    if (!px) return attn__fail(ctx, ATTN_E_NOMEM, "panels: out of memory (%zu bytes)", nbytes);
    attn_cli_canvas cv = {W, H, px};
    attn_cli_fill_rect(&cv, 0, 0, W, H, C_BG);
    char buf[PN_TITLE_MAX + 1];
    if (title_h) {
        cut(title, (W - 2 * margin) / ATTN_CLI_FONT_ADV, buf, sizeof buf);
        attn_cli_draw_text(&cv, margin, margin, buf, 1, 0, 0, C_TEXT);
    }
    int y0 = margin + title_h + line + 4, chars = (size + 2) / ATTN_CLI_FONT_ADV;
    for (int i = 0; i < n; i++) {
        const attn_cli_panel *p = &panels[i];
        int x0 = margin + i * (size + gap);
        float lo = p->lo, hi = p->hi;
        if (!(lo < hi)) { /* the panel's own range */
            lo = hi = p->values[0];
            for (int k = 1; k < p->rows * p->cols; k++) {
                if (p->values[k] < lo) lo = p->values[k];
                if (p->values[k] > hi) hi = p->values[k];
            }
        }
        float span = hi > lo ? hi - lo : 1.0f;
        for (int y = 0; y < size; y++) {
            int r = (int)((long long)y * p->rows / size);
            for (int x = 0; x < size; x++) {
                int c = (int)((long long)x * p->cols / size);
                float t = (p->values[r * p->cols + c] - lo) / span;
                unsigned char rgb[3];
                if (p->gray) {
                    if (!(t > 0.0f)) t = 0.0f;
                    if (t > 1.0f) t = 1.0f;
                    rgb[0] = rgb[1] = rgb[2] = (unsigned char)(t * 255.0f + 0.5f);
                } else {
                    attn_cli_colormap(t, rgb);
                }
                unsigned char *q = px + ((size_t)(y0 + y) * (size_t)W + (size_t)(x0 + x)) * 3;
                memcpy(q, rgb, 3);
            }
        }
        /* a one-pixel frame just outside the panel */
        attn_cli_fill_rect(&cv, x0 - 1, y0 - 1, size + 2, 1, C_FRAME);
        attn_cli_fill_rect(&cv, x0 - 1, y0 + size, size + 2, 1, C_FRAME);
        attn_cli_fill_rect(&cv, x0 - 1, y0, 1, size, C_FRAME);
        attn_cli_fill_rect(&cv, x0 + size, y0, 1, size, C_FRAME);
        if (p->label) {
            cut(p->label, chars, buf, sizeof buf);
            attn_cli_draw_text(&cv, x0, y0 - line - 3, buf, 1, 0, 0, C_TEXT);
        }
        if (p->note) {
            cut(p->note, chars, buf, sizeof buf);
            attn_cli_draw_text(&cv, x0, y0 + size + 4, buf, 1, 0, 0, C_DIM);
        }
    }
    *out = cv;
    return ATTN_OK;
}

attn_status attn_cli_panels_png(attn_ctx *ctx, const char *path, const attn_cli_panel *panels,
                                int n, int size, const char *title) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "panels: output path is NULL or empty");
    attn_cli_canvas cv;
    ATTN_TRY(attn_cli_panels_render(ctx, panels, n, size, title, &cv));
    attn_status st = attn_cli_png_write(ctx, path, cv.w, cv.h, cv.px);
    attn__free(ctx, cv.px);
    return st;
}
