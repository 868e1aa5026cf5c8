/* Loss curve as an SVG line chart (pictures.h: attn_cli_loss_curve_svg): training loss as a
 * line, validation loss as a line with markers, drawn by the line chart of chart.c (axes with
 * "nice" ticks, grid lines, axis titles, a legend and an optional title).  Non-finite values
 * are left out (the line breaks there). */
#include <math.h>
#include <string.h>

#include "draw.h"

#define SVG_MAX_POINTS 10000000

attn_status attn_cli_loss_curve_svg_text(attn_ctx *ctx, const float *steps, const float *train_loss,
                                         int n, const float *val_steps, const float *val_loss,
                                         int nval, const char *val_label, const char *title,
                                         char **out, size_t *out_n) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out || !out_n, ctx, ATTN_E_INVALID, "loss curve: output is NULL");
    *out = NULL;
    *out_n = 0;
    ATTN_FAIL_IF(n < 0 || nval < 0 || n > SVG_MAX_POINTS || nval > SVG_MAX_POINTS, ctx,
                 ATTN_E_INVALID, "loss curve: point counts %d and %d outside 0..%d", n, nval,
                 SVG_MAX_POINTS);
    ATTN_FAIL_IF(n > 0 && (!steps || !train_loss), ctx, ATTN_E_INVALID,
                 "loss curve: steps or train_loss is NULL with n = %d", n);
    ATTN_FAIL_IF(nval > 0 && (!val_steps || !val_loss), ctx, ATTN_E_INVALID,
                 "loss curve: val_steps or val_loss is NULL with nval = %d", nval);
    ATTN_FAIL_IF(n == 0 && nval == 0, ctx, ATTN_E_INVALID, "loss curve: no points");
    /* the chart takes doubles: one array of 2 (n + nval) values */
    size_t total = 2 * ((size_t)n + (size_t)nval); /* <= 4e7: no overflow */
    double *v = attn__malloc(ctx, total * sizeof *v);
    if (!v) return attn__fail(ctx, ATTN_E_NOMEM, "loss curve: out of memory");
    double *tx = v, *ty = v + n, *vx = v + 2 * (size_t)n, *vy = vx + nval;
    for (int i = 0; i < n; i++) tx[i] = steps[i], ty[i] = train_loss[i];
    for (int i = 0; i < nval; i++) vx[i] = val_steps[i], vy[i] = val_loss[i];
    attn_cli_series s[2];
    int ns = 0;
    memset(s, 0, sizeof s);
    if (n > 0) s[ns++] = (attn_cli_series){"train", tx, ty, n, 0x1f77b4u, 1.6f, 0};
    if (nval > 0)
        s[ns++] = (attn_cli_series){val_label ? val_label : "validation", vx, vy, nval, 0xe6550du,
                                    2.0f, 1};
    attn_cli_chart_panel panel = {"loss", NULL, NULL, s, ns, 0, 1, 6};
    attn_cli_chart chart = {title, "step", &panel, 1, 760, 340};
    attn_status st = attn_cli_chart_svg_text(ctx, &chart, out, out_n);
    attn__free(ctx, v);
    return st;
}

attn_status attn_cli_loss_curve_svg(attn_ctx *ctx, const char *path, const float *steps,
                                    const float *train_loss, int n, const float *val_steps,
                                    const float *val_loss, int nval, const char *val_label,
                                    const char *title) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID,
                 "loss curve: output path is NULL or empty");
    char *text;
    size_t len;
    ATTN_TRY(attn_cli_loss_curve_svg_text(ctx, steps, train_loss, n, val_steps, val_loss, nval,
                                          val_label, title, &text, &len));
    attn_status st = attn_cli_write_file(ctx, path, text, len);
    attn__free(ctx, text);
    return st;
}
