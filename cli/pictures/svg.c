/* Loss curve as an SVG line chart: training loss as a line, validation loss as a line with
 * markers, axes with "nice" ticks (1, 2, 5 x 10^k), grid lines, axis titles, a legend and an
 * optional title.  Non-finite values are left out (the line breaks there). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "draw.h"

typedef struct sbuf {
    attn_ctx *ctx;
    char *p;
    size_t n, cap;
    int failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) ATTN__PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) {
        b->failed = 1; /* every format below is short: this is a bug, not user data */
        return;
    }
    while (b->cap < b->n + (size_t)k + 1) /* room for the text and its NUL */
        if (!attn__grow(b->ctx, (void **)&b->p, &b->cap, b->cap, 1)) {
            b->failed = 1;
            return;
        }
    memcpy(b->p + b->n, tmp, (size_t)k + 1);
    b->n += (size_t)k;
}

/* Text content with XML escapes; control characters become spaces. */
static void sb_text(sbuf *b, const char *s) {
    char one[2] = {0, 0};
    for (size_t i = 0; s && s[i] && i < 400; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        default:
            one[0] = (char)(c < 32 || c == 127 ? ' ' : c);
            sb_printf(b, "%s", one);
        }
    }
}

/* Tick spacing of about range / target: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    double m = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
    return m * mag;
}

static void fmt_num(double v, double step, char *buf, size_t n) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e5 || (fabs(v) < 1e-3 && v != 0)) snprintf(buf, n, "%.2g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        if (dec > 6) dec = 6;
        snprintf(buf, n, "%.*f", dec, v);
    }
}

/* A series: polyline runs between non-finite values; markers optional. */
static void series(sbuf *b, const float *xs, const float *ys, int n, double x0, double xs_,
                   double y0, double ys_, double px0, double py1, const char *colour,
                   double width, int markers) {
    int open = 0;
    for (int i = 0; i < n; i++) {
        int ok = isfinite(xs[i]) && isfinite(ys[i]);
        if (!ok) {
            if (open) sb_printf(b, "\"/>\n");
            open = 0;
            continue;
        }
        double X = px0 + (xs[i] - x0) * xs_, Y = py1 - (ys[i] - y0) * ys_;
        if (!open)
            sb_printf(b,
                      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
                      "stroke-linejoin=\"round\" points=\"",
                      colour, width);
        sb_printf(b, "%s%.1f,%.1f", open ? " " : "", X, Y);
        open = 1;
    }
    if (open) sb_printf(b, "\"/>\n");
    if (markers)
        for (int i = 0; i < n; i++)
            if (isfinite(xs[i]) && isfinite(ys[i]))
                sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                          px0 + (xs[i] - x0) * xs_, py1 - (ys[i] - y0) * ys_, colour);
}

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

    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < 2; s++) {
        const float *xs = s ? val_steps : steps, *ys = s ? val_loss : train_loss;
        int m = s ? nval : n;
        for (int i = 0; i < m; i++) {
            if (!isfinite(xs[i]) || !isfinite(ys[i])) continue;
            if (xs[i] < xmin) xmin = xs[i];
            if (xs[i] > xmax) xmax = xs[i];
            if (ys[i] < ymin) ymin = ys[i];
            if (ys[i] > ymax) ymax = ys[i];
        }
    }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1; /* nothing finite: empty axes */
    if (!(ymin <= ymax)) ymin = 0, ymax = 1;
    if (xmax - xmin <= 0) xmin -= 1, xmax += 1;
    if (ymax - ymin <= 0) ymin -= fabs(ymin) * 0.1 + 0.5, ymax += fabs(ymax) * 0.1 + 0.5;
    if (ymin >= 0 && ymin < 0.25 * (ymax - ymin)) ymin = 0; /* losses: start the axis at 0 */
    double ystep = nice_step(ymax - ymin, 6), xstep = nice_step(xmax - xmin, 8);
    double y0 = floor(ymin / ystep) * ystep, y1 = ceil(ymax / ystep) * ystep;
    double x0 = floor(xmin / xstep) * xstep, x1 = ceil(xmax / xstep) * xstep;

    const int W = 760, H = 460, ml = 78, mr = 24, mt = 52, mb = 60;
    const double pw = W - ml - mr, ph = H - mt - mb;
    const double px0 = ml, py1 = mt + ph;
    double xs_ = pw / (x1 - x0), ys_ = ph / (y1 - y0);

    sbuf b = {ctx, NULL, 0, 0, 0};
    sb_printf(&b,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
              "font-size=\"13\">\n",
              W, H, W, H);
    sb_printf(&b, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    if (title && title[0]) {
        sb_printf(&b, "<text x=\"%.1f\" y=\"30\" text-anchor=\"middle\" font-size=\"17\" "
                      "font-weight=\"bold\" fill=\"#222\">",
                  W / 2.0);
        sb_text(&b, title);
        sb_printf(&b, "</text>\n");
    }
    /* grid and ticks */
    char num[64];
    sb_printf(&b, "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for (int k = 0; k <= 1000; k++) {
        double v = y0 + k * ystep;
        if (v > y1 + ystep * 1e-6) break;
        double Y = py1 - (v - y0) * ys_;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px0, Y,
                  px0 + pw, Y);
    }
    double xt0 = ceil(x0 / xstep - 1e-9) * xstep;
    for (int k = 0; k <= 1000; k++) {
        double v = xt0 + k * xstep;
        if (v > x1 + xstep * 1e-6) break;
        double X = px0 + (v - x0) * xs_;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", X, mt, X, py1);
    }
    sb_printf(&b, "</g>\n<g fill=\"#333\">\n");
    for (int k = 0; k <= 1000; k++) {
        double v = y0 + k * ystep;
        if (v > y1 + ystep * 1e-6) break;
        fmt_num(v, ystep, num, sizeof num);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", px0 - 8,
                  py1 - (v - y0) * ys_ + 4.5, num);
    }
    for (int k = 0; k <= 1000; k++) {
        double v = xt0 + k * xstep;
        if (v > x1 + xstep * 1e-6) break;
        fmt_num(v, xstep, num, sizeof num);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                  px0 + (v - x0) * xs_, py1 + 20, num);
    }
    sb_printf(&b, "</g>\n");
    /* axes and their titles */
    sb_printf(&b,
              "<path d=\"M%.1f,%d V%.1f H%.1f\" fill=\"none\" stroke=\"#444\" "
              "stroke-width=\"1.2\"/>\n",
              px0, mt, py1, px0 + pw);
    sb_printf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#222\">step</text>\n",
              px0 + pw / 2, H - 16);
    sb_printf(&b,
              "<text transform=\"translate(22,%.1f) rotate(-90)\" text-anchor=\"middle\" "
              "fill=\"#222\">loss</text>\n",
              mt + ph / 2);
    /* the data, clipped to the plot area */
    sb_printf(&b,
              "<clipPath id=\"plot\"><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
              "height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#plot)\">\n",
              px0 - 4, mt - 4, pw + 8, ph + 8);
    if (n > 0) series(&b, steps, train_loss, n, x0, xs_, y0, ys_, px0, py1, "#1f77b4", 1.6, 0);
    if (nval > 0)
        series(&b, val_steps, val_loss, nval, x0, xs_, y0, ys_, px0, py1, "#e6550d", 2.0, 1);
    sb_printf(&b, "</g>\n");
    /* legend, top right inside the plot */
    int nleg = (n > 0) + (nval > 0), lx = (int)(px0 + pw) - 150, ly = mt + 10;
    sb_printf(&b,
              "<rect x=\"%d\" y=\"%d\" width=\"140\" height=\"%d\" fill=\"white\" "
              "fill-opacity=\"0.9\" stroke=\"#bbb\"/>\n",
              lx, ly, 10 + 20 * nleg);
    int row = 0;
    if (n > 0) {
        int y = ly + 15 + 20 * row++;
        sb_printf(&b,
                  "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" "
                  "stroke-width=\"2\"/><text x=\"%d\" y=\"%d\" fill=\"#222\">train</text>\n",
                  lx + 10, y, lx + 40, y, lx + 48, y + 4);
    }
    if (nval > 0) {
        int y = ly + 15 + 20 * row++;
        sb_printf(&b,
                  "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e6550d\" "
                  "stroke-width=\"2\"/><circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"#e6550d\"/>"
                  "<text x=\"%d\" y=\"%d\" fill=\"#222\">",
                  lx + 10, y, lx + 40, y, lx + 25, y, lx + 48, y + 4);
        sb_text(&b, val_label ? val_label : "validation");
        sb_printf(&b, "</text>\n");
    }
    sb_printf(&b, "</svg>\n");
    if (b.failed) {
        attn__free(ctx, b.p);
        return attn__fail(ctx, ATTN_E_NOMEM, "loss curve: out of memory");
    }
    *out = b.p;
    *out_n = b.n;
    return ATTN_OK;
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
