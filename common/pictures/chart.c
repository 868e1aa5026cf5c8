/* Line charts (pictures.h: attn_cli_chart): one or more panels stacked vertically that share
 * the x axis, each with its own y axis (linear or logarithmic), "nice" ticks (1, 2, 5 x 10^k),
 * grid lines, a legend row under the title, and any number of series per panel.
 *
 * One layout routine draws through a small drawing interface with two ends: SVG text, and an
 * RGB canvas (anti-aliased lines and dots, the 5x9 bitmap font of heatmap.c) that becomes a
 * PNG.  Points are streamed: per pixel column at most the first, lowest, highest and last
 * point of a run are drawn, so a series of millions of points costs no more output than the
 * chart is wide, and its shape (the extremes) is kept.  Non-finite values (and values <= 0 on
 * a logarithmic axis) break the line. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "draw.h"

#define CH_MAX_PANELS 16
#define CH_MAX_SERIES 256
#define CH_MAX_POINTS 100000000
#define CH_MAX_MARKERS 1000
#define CH_MAX_LEGEND 64
#define CH_MAX_TICKS 40
#define CH_MAX_LABEL 120 /* characters of a label, a title or a caption drawn */

/* ---- SVG text buffer ------------------------------------------------------------------- */
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

/* Text content with XML escapes; control characters become spaces; bytes of UTF-8 pass. */
static void sb_text(sbuf *b, const char *s) {
    char one[2] = {0, 0};
    for (size_t i = 0; s && s[i] && i < CH_MAX_LABEL; i++) {
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

/* ---- the drawing interface -------------------------------------------------------------- */
typedef struct gfx {
    int svg;  /* 1: SVG text into b; 0: the canvas */
    sbuf b;
    attn_cli_canvas cv;
    int s;               /* canvas pixels per chart unit */
    unsigned char *mask; /* [h, w] coverage of the line being drawn */
    int mx0, my0, mx1, my1;      /* its dirty box (device pixels, exclusive end) */
    double cx0, cy0, cx1, cy1;   /* clip box (chart units) of lines and dots */
    int clip;
    /* the line in progress */
    int open, npts;
    double lx, ly, w;
    unsigned rgb;
} gfx;

static void hex(unsigned rgb, char out[8]) { snprintf(out, 8, "#%06x", rgb & 0xffffffu); }

static void rgb3(unsigned rgb, unsigned char c[3]) {
    c[0] = (unsigned char)(rgb >> 16);
    c[1] = (unsigned char)(rgb >> 8);
    c[2] = (unsigned char)rgb;
}

/* Font pixel scale of text of a size (the SVG font size, in chart units) on the canvas. */
static int font_scale(const gfx *g, double size) {
    int k = (int)lround(size * g->s / 9.0);
    return k < 1 ? 1 : k;
}

static size_t label_len(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n < CH_MAX_LABEL ? n : CH_MAX_LABEL;
}

/* Width of a text in chart units: measured on the canvas, estimated for SVG. */
static double text_w(const gfx *g, const char *s, double size) {
    size_t n = label_len(s);
    if (g->svg) return (double)n * size * 0.62;
    int k = font_scale(g, size);
    return n ? ((double)n * ATTN_CLI_FONT_ADV - 1) * k / g->s : 0;
}

/* Horizontal or vertical line, or a filled rectangle, in chart units. */
static void g_rect(gfx *g, double x, double y, double w, double h, unsigned rgb) {
    if (g->svg) {
        char c[8];
        hex(rgb, c);
        sb_printf(&g->b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                  x, y, w, h, c);
        return;
    }
    unsigned char c[3];
    rgb3(rgb, c);
    int x0 = (int)lround(x * g->s), y0 = (int)lround(y * g->s);
    int x1 = (int)lround((x + w) * g->s), y1 = (int)lround((y + h) * g->s);
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    attn_cli_fill_rect(&g->cv, x0, y0, x1 - x0, y1 - y0, c);
}

/* An axis-parallel line from (x0, y0) to (x1, y1) (x0 == x1 or y0 == y1), w wide. */
static void g_axline(gfx *g, double x0, double y0, double x1, double y1, double w, unsigned rgb) {
    if (g->svg) {
        char c[8];
        hex(rgb, c);
        sb_printf(&g->b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"%.1f\"/>\n",
                  x0, y0, x1, y1, c, w);
    } else if (y0 == y1) {
        g_rect(g, x0, y0 - w / 2, x1 - x0, w, rgb);
    } else {
        g_rect(g, x0 - w / 2, y0, w, y1 - y0, rgb);
    }
}
static void g_hline(gfx *g, double x0, double x1, double y, double w, unsigned rgb) {
    g_axline(g, x0, y, x1, y, w, rgb);
}
static void g_vline(gfx *g, double x, double y0, double y1, double w, unsigned rgb) {
    g_axline(g, x, y0, x, y1, w, rgb);
}

/* Blends colour c into canvas pixel (x, y) with coverage a in [0, 1]. */
static void blend(gfx *g, int x, int y, const unsigned char c[3], double a) {
    if (x < 0 || y < 0 || x >= g->cv.w || y >= g->cv.h) return;
    unsigned char *p = g->cv.px + ((size_t)y * (size_t)g->cv.w + (size_t)x) * 3;
    for (int k = 0; k < 3; k++) p[k] = (unsigned char)lround(p[k] + (c[k] - p[k]) * a);
}

/* Device-pixel bounds of the clip box (or the canvas). */
static void clip_px(const gfx *g, int *x0, int *y0, int *x1, int *y1) {
    *x0 = 0, *y0 = 0, *x1 = g->cv.w, *y1 = g->cv.h;
    if (!g->clip) return;
    int a = (int)floor(g->cx0 * g->s), b = (int)floor(g->cy0 * g->s);
    int c = (int)ceil(g->cx1 * g->s), d = (int)ceil(g->cy1 * g->s);
    if (a > *x0) *x0 = a;
    if (b > *y0) *y0 = b;
    if (c < *x1) *x1 = c;
    if (d < *y1) *y1 = d;
}

/* A filled dot of radius r (chart units). */
static void g_dot(gfx *g, double x, double y, double r, unsigned rgb) {
    if (g->svg) {
        char c[8];
        hex(rgb, c);
        sb_printf(&g->b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"/>\n", x, y, r, c);
        return;
    }
    unsigned char c[3];
    rgb3(rgb, c);
    double X = x * g->s, Y = y * g->s, R = r * g->s;
    int bx0, by0, bx1, by1;
    clip_px(g, &bx0, &by0, &bx1, &by1);
    int x0 = (int)floor(X - R - 1), x1 = (int)ceil(X + R + 1);
    int y0 = (int)floor(Y - R - 1), y1 = (int)ceil(Y + R + 1);
    if (x0 < bx0) x0 = bx0;
    if (y0 < by0) y0 = by0;
    if (x1 > bx1) x1 = bx1;
    if (y1 > by1) y1 = by1;
    for (int py = y0; py < y1; py++)
        for (int px = x0; px < x1; px++) {
            double d = hypot(px + 0.5 - X, py + 0.5 - Y), a = R + 0.5 - d;
            if (a > 0) blend(g, px, py, c, a > 1 ? 1 : a);
        }
}

/* Coverage of the segment (ax, ay)-(bx, by) of half width r (device pixels) into the mask:
 * only a band around the segment is visited, so the cost follows its length. */
static void mask_seg(gfx *g, double ax, double ay, double bx, double by, double r) {
    int cx0, cy0, cx1, cy1;
    clip_px(g, &cx0, &cy0, &cx1, &cy1);
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    int steep = fabs(dy) > fabs(dx);
    /* along the major axis u, across it v */
    double ua = steep ? ay : ax, ub = steep ? by : bx, va = steep ? ax : ay, vb = steep ? bx : by;
    if (ua > ub) {
        double t = ua;
        ua = ub, ub = t;
        t = va, va = vb, vb = t;
    }
    double slope = ub > ua ? (vb - va) / (ub - ua) : 0, band = r * sqrt(1 + slope * slope) + 1.5;
    int u0 = (int)floor(ua - r - 1), u1 = (int)ceil(ub + r + 1);
    int ulo = steep ? cy0 : cx0, uhi = steep ? cy1 : cx1;
    int vlo = steep ? cx0 : cy0, vhi = steep ? cx1 : cy1;
    if (u0 < ulo) u0 = ulo;
    if (u1 > uhi) u1 = uhi;
    for (int u = u0; u < u1; u++) {
        double uc = u + 0.5, ut = uc < ua ? ua : uc > ub ? ub : uc;
        double vc = va + (ut - ua) * slope;
        int v0 = (int)floor(vc - band), v1 = (int)ceil(vc + band);
        if (v0 < vlo) v0 = vlo;
        if (v1 > vhi) v1 = vhi;
        for (int v = v0; v < v1; v++) {
            double px = steep ? v + 0.5 : uc, py = steep ? uc : v + 0.5;
            double t = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double d = hypot(px - (ax + t * dx), py - (ay + t * dy)), a = r + 0.5 - d;
            if (a <= 0) continue;
            int x = steep ? v : u, y = steep ? u : v;
            unsigned char m = (unsigned char)lround((a > 1 ? 1 : a) * 255);
            unsigned char *q = g->mask + (size_t)y * (size_t)g->cv.w + (size_t)x;
            if (m > *q) *q = m;
            if (x < g->mx0) g->mx0 = x;
            if (y < g->my0) g->my0 = y;
            if (x + 1 > g->mx1) g->mx1 = x + 1;
            if (y + 1 > g->my1) g->my1 = y + 1;
        }
    }
}

/* A line through points given one at a time: begin, point..., end.  On the canvas each line
 * is drawn into the coverage mask and blended once, so its joints are not drawn twice. */
static void g_line_begin(gfx *g, unsigned rgb, double w) {
    g->open = 1, g->npts = 0, g->rgb = rgb, g->w = w;
    g->mx0 = g->cv.w, g->my0 = g->cv.h, g->mx1 = 0, g->my1 = 0;
}

static void g_line_point(gfx *g, double x, double y) {
    if (g->svg) {
        if (g->npts == 0) {
            char c[8];
            hex(g->rgb, c);
            sb_printf(&g->b,
                      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
                      "stroke-linejoin=\"round\" stroke-linecap=\"round\" points=\"",
                      c, g->w);
        }
        sb_printf(&g->b, "%s%.1f,%.1f", g->npts ? " " : "", x, y);
    } else if (g->npts > 0) {
        mask_seg(g, g->lx * g->s, g->ly * g->s, x * g->s, y * g->s, g->w * g->s / 2);
    }
    g->lx = x, g->ly = y;
    g->npts++;
}

static void g_line_end(gfx *g) {
    if (!g->open) return;
    g->open = 0;
    if (g->svg) {
        if (g->npts) sb_printf(&g->b, "\"/>\n");
        return;
    }
    unsigned char c[3];
    rgb3(g->rgb, c);
    for (int y = g->my0; y < g->my1; y++)
        for (int x = g->mx0; x < g->mx1; x++) {
            unsigned char *q = g->mask + (size_t)y * (size_t)g->cv.w + (size_t)x;
            if (*q) blend(g, x, y, c, *q / 255.0);
            *q = 0;
        }
}

enum { ANCHOR_START, ANCHOR_MIDDLE, ANCHOR_END };

/* Text with its baseline at y; vertical: turned 90 degrees counter-clockwise about (x, y). */
static void g_text(gfx *g, double x, double y, const char *s, double size, int anchor,
                   int vertical, int bold, unsigned rgb) {
    if (!s || !s[0]) return;
    if (g->svg) {
        char c[8];
        hex(rgb, c);
        static const char *const an[] = {"start", "middle", "end"};
        if (vertical)
            sb_printf(&g->b, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\"", x, y);
        else
            sb_printf(&g->b, "<text x=\"%.1f\" y=\"%.1f\"", x, y);
        sb_printf(&g->b, " font-size=\"%.0f\" text-anchor=\"%s\" fill=\"%s\"%s>", size, an[anchor],
                  c, bold ? " font-weight=\"bold\"" : "");
        sb_text(&g->b, s);
        sb_printf(&g->b, "</text>\n");
        return;
    }
    char buf[CH_MAX_LABEL + 1];
    size_t n = label_len(s);
    memcpy(buf, s, n);
    buf[n] = 0;
    unsigned char c[3];
    rgb3(rgb, c);
    int k = font_scale(g, size);
    double w = text_w(g, buf, size);
    double shift = anchor == ANCHOR_MIDDLE ? w / 2 : anchor == ANCHOR_END ? w : 0;
    int X, Y;
    if (!vertical) {
        X = (int)lround((x - shift) * g->s);
        Y = (int)lround(y * g->s) - 7 * k; /* 7 font rows above the baseline */
    } else {
        X = (int)lround(x * g->s) - 7 * k;
        Y = (int)lround((y + shift) * g->s);
    }
    attn_cli_draw_text(&g->cv, X, Y, buf, k, vertical, 0, c);
    if (bold) {
        int d = k > 2 ? k / 2 : 1;
        attn_cli_draw_text(&g->cv, X + (vertical ? 0 : d), Y - (vertical ? d : 0), buf, k, vertical,
                           0, c);
    }
}

static void g_clip(gfx *g, int id, double x, double y, double w, double h) {
    g->clip = 1, g->cx0 = x, g->cy0 = y, g->cx1 = x + w, g->cy1 = y + h;
    if (g->svg)
        sb_printf(&g->b,
                  "<clipPath id=\"plot%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                  "height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#plot%d)\">\n",
                  id, x, y, w, h, id);
}

static void g_unclip(gfx *g) {
    g->clip = 0;
    if (g->svg) sb_printf(&g->b, "</g>\n");
}

/* ---- axes ------------------------------------------------------------------------------ */
typedef struct axis {
    int log;        /* lo, hi are powers of ten (log10 units) */
    double lo, hi;  /* the axis range (log10 units when log) */
    int nt;
    double t[CH_MAX_TICKS]; /* tick values (data units) */
    char lab[CH_MAX_TICKS][24];
} axis;

/* Tick spacing of about range / target: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    double m = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
    return m * mag;
}

/* A tick label: k/M/G for large values, as many decimals as the step needs. */
static void fmt_tick(double v, double step, double maxabs, char *buf, size_t n) {
    if (fabs(v) < step * 1e-6) {
        snprintf(buf, n, "0");
        return;
    }
    const char *suf = "";
    double div = 1;
    if (maxabs >= 1e9) div = 1e9, suf = "G";
    else if (maxabs >= 1e6) div = 1e6, suf = "M";
    else if (maxabs >= 1e4) div = 1e3, suf = "k";
    v /= div;
    double st = step / div;
    int dec = st >= 1 ? 0 : (int)ceil(-log10(st) - 1e-9);
    if (dec > 8) snprintf(buf, n, "%.2g%s", v, suf);
    else snprintf(buf, n, "%.*f%s", dec, v, suf);
}

/* A linear axis over [mn, mx] (finite, mn <= mx) with about target ticks. */
static void axis_linear(axis *a, double mn, double mx, int target) {
    a->log = 0;
    if (mx - mn <= 0) {
        double d = fabs(mn) * 0.1 + 0.5;
        mn -= d, mx += d;
    }
    double step = nice_step(mx - mn, target);
    a->lo = floor(mn / step) * step;
    a->hi = ceil(mx / step) * step;
    if (!(a->hi > a->lo)) a->hi = a->lo + step;
    double maxabs = fmax(fabs(a->lo), fabs(a->hi));
    a->nt = 0;
    double t0 = ceil(a->lo / step - 1e-9) * step;
    for (int k = 0; a->nt < CH_MAX_TICKS; k++) {
        double v = t0 + k * step;
        if (v > a->hi + step * 1e-6) break;
        a->t[a->nt] = v;
        fmt_tick(v, step, maxabs, a->lab[a->nt], sizeof a->lab[0]);
        a->nt++;
    }
}

/* A logarithmic axis over [mn, mx] (0 < mn <= mx): whole decades, ticks at each (and at 2 and
 * 5 times each when the axis spans at most two decades). */
static void axis_log(axis *a, double mn, double mx) {
    a->log = 1;
    a->lo = floor(log10(mn) + 1e-9);
    a->hi = ceil(log10(mx) - 1e-9);
    if (a->hi <= a->lo) a->hi = a->lo + 1;
    int span = (int)(a->hi - a->lo), every = span > 12 ? (span + 11) / 12 : 1;
    a->nt = 0;
    for (int d = 0; d <= span && a->nt < CH_MAX_TICKS; d += every) {
        static const double mult[3] = {1, 2, 5};
        for (int m = 0; m < (span <= 2 ? 3 : 1) && a->nt < CH_MAX_TICKS; m++) {
            double v = mult[m] * pow(10.0, a->lo + d);
            if (log10(v) > a->hi + 1e-9) break;
            a->t[a->nt] = v;
            snprintf(a->lab[a->nt], sizeof a->lab[0], "%g", v);
            a->nt++;
        }
    }
}

/* 0..1 along the axis; NaN for a value it cannot show. */
static double axis_pos(const axis *a, double v) {
    if (a->log) return v > 0 ? (log10(v) - a->lo) / (a->hi - a->lo) : NAN;
    return (v - a->lo) / (a->hi - a->lo);
}

static int usable(double x, double y, int log_y) {
    return isfinite(x) && isfinite(y) && (!log_y || y > 0);
}

/* ---- the chart ------------------------------------------------------------------------- */
typedef struct legend_entry {
    const attn_cli_series *s;
    double x, y; /* where the sample line starts (its vertical middle) */
} legend_entry;

typedef struct layout {
    int W, H;
    double ml, mr, top, legend_y, panel_top[CH_MAX_PANELS], ph, band;
    axis x, y[CH_MAX_PANELS];
    int nleg;
    legend_entry leg[CH_MAX_LEGEND];
} layout;

#define C_TEXT 0x222222u
#define C_TICK 0x444444u
#define C_GRID 0xe6e6e6u
#define C_AXIS 0x555555u
#define C_NOTE 0x777777u

static attn_status check_chart(attn_ctx *ctx, const attn_cli_chart *c) {
    ATTN_FAIL_IF(!c, ctx, ATTN_E_INVALID, "chart: NULL chart");
    ATTN_FAIL_IF(c->npanels < 1 || c->npanels > CH_MAX_PANELS || !c->panels, ctx, ATTN_E_INVALID,
                 "chart: %d panels; there must be 1..%d", c->npanels, CH_MAX_PANELS);
    ATTN_FAIL_IF(c->width < 0 || c->width > 4000 || c->panel_height < 0 || c->panel_height > 4000,
                 ctx, ATTN_E_INVALID, "chart: size %d x %d outside 0..4000", c->width,
                 c->panel_height);
    for (int p = 0; p < c->npanels; p++) {
        const attn_cli_chart_panel *P = &c->panels[p];
        ATTN_FAIL_IF(P->nseries < 0 || P->nseries > CH_MAX_SERIES || (P->nseries && !P->series),
                     ctx, ATTN_E_INVALID, "chart: panel %d has %d series (0..%d)", p, P->nseries,
                     CH_MAX_SERIES);
        for (int i = 0; i < P->nseries; i++) {
            const attn_cli_series *s = &P->series[i];
            ATTN_FAIL_IF(s->n < 0 || s->n > CH_MAX_POINTS || (s->n && (!s->x || !s->y)), ctx,
                         ATTN_E_INVALID, "chart: panel %d series %d: %d points, or no arrays", p,
                         i, s->n);
        }
    }
    return ATTN_OK;
}

static void compute_layout(const gfx *g, const attn_cli_chart *c, layout *L) {
    L->W = c->width ? c->width : 900;
    L->ph = c->panel_height ? c->panel_height : 280;
    /* x range over every panel; y range per panel */
    double xmin = INFINITY, xmax = -INFINITY;
    double maxtick = 0;
    for (int p = 0; p < c->npanels; p++) {
        const attn_cli_chart_panel *P = &c->panels[p];
        double ymin = INFINITY, ymax = -INFINITY;
        for (int i = 0; i < P->nseries; i++) {
            const attn_cli_series *s = &P->series[i];
            for (int k = 0; k < s->n; k++) {
                if (!usable(s->x[k], s->y[k], P->log_y)) continue;
                xmin = fmin(xmin, s->x[k]), xmax = fmax(xmax, s->x[k]);
                ymin = fmin(ymin, s->y[k]), ymax = fmax(ymax, s->y[k]);
            }
        }
        if (P->log_y) {
            if (!(ymin <= ymax)) ymin = 0.1, ymax = 10;
            axis_log(&L->y[p], ymin, ymax);
        } else {
            if (!(ymin <= ymax)) ymin = 0, ymax = 1;
            if (P->zero_y && ymin >= 0 && ymin < 0.25 * (ymax - ymin)) ymin = 0;
            axis_linear(&L->y[p], ymin, ymax, P->ticks ? P->ticks : 6);
        }
        for (int k = 0; k < L->y[p].nt; k++) maxtick = fmax(maxtick, text_w(g, L->y[p].lab[k], 12));
    }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1;
    axis_linear(&L->x, xmin, xmax, 8);
    /* margins: the axis title, the tick labels, a gap */
    L->ml = floor(22 + 10 + maxtick + 10);
    if (L->ml < 64) L->ml = 64;
    L->mr = 26;
    double pw = L->W - L->ml - L->mr;
    /* title, then the legend rows */
    double y = 14;
    if (c->title && c->title[0]) y += 24;
    L->legend_y = y;
    L->nleg = 0;
    double lx = L->ml, rows = 0;
    for (int p = 0; p < c->npanels; p++)
        for (int i = 0; i < c->panels[p].nseries; i++) {
            const attn_cli_series *s = &c->panels[p].series[i];
            if (!s->label || !s->label[0] || L->nleg >= CH_MAX_LEGEND) continue;
            int dup = 0;
            for (int k = 0; k < L->nleg; k++)
                if (L->leg[k].s->rgb == s->rgb && !strcmp(L->leg[k].s->label, s->label)) dup = 1;
            if (dup) continue;
            double w = 28 + 6 + text_w(g, s->label, 13) + 22;
            if (rows == 0) rows = 1;
            if (lx > L->ml && lx + w > L->ml + pw) lx = L->ml, rows++;
            L->leg[L->nleg].s = s;
            L->leg[L->nleg].x = lx;
            L->leg[L->nleg].y = L->legend_y + 10 + (rows - 1) * 20;
            L->nleg++;
            lx += w;
        }
    y += rows * 20 + (rows ? 6 : 0);
    /* panels: a caption band, the plot, the tick labels */
    int bands = 0;
    for (int p = 0; p < c->npanels; p++) bands |= c->panels[p].caption && c->panels[p].caption[0];
    L->band = bands ? 20 : 0;
    L->top = y + 6;
    y = L->top;
    for (int p = 0; p < c->npanels; p++) {
        y += L->band;
        L->panel_top[p] = y;
        y += L->ph + 24 + (p + 1 < c->npanels ? 14 : 0);
    }
    y += (c->xlabel && c->xlabel[0]) ? 22 : 0;
    L->H = (int)ceil(y + 10);
}

/* Draws series s of panel p: the line (streamed, per pixel column at most 4 points of a run)
 * and the markers. */
static void draw_series(gfx *g, const layout *L, int p, const attn_cli_chart_panel *P,
                        const attn_cli_series *s) {
    double px0 = L->ml, pw = L->W - L->ml - L->mr, py1 = L->panel_top[p] + L->ph;
    const axis *ax = &L->x, *ay = &L->y[p];
    double w = s->width > 0 ? s->width : 1.6;
    /* the points of the current pixel column: first, lowest, highest, last (indices) */
    long col = 0;
    int have = 0, kf = 0, kmin = 0, kmax = 0, kl = 0;
    double X[4], Y[4];
    g_line_begin(g, s->rgb, w);
    for (int k = 0; k <= s->n; k++) {
        int ok = k < s->n && usable(s->x[k], s->y[k], P->log_y);
        double x = 0, y = 0;
        long cc = 0;
        if (ok) {
            x = px0 + axis_pos(ax, s->x[k]) * pw;
            y = py1 - axis_pos(ay, s->y[k]) * L->ph;
            if (!isfinite(x) || !isfinite(y) || fabs(x) > 1e7 || fabs(y) > 1e7) ok = 0;
            else cc = (long)floor(x * g->s);
        }
        if (have && (!ok || cc != col)) { /* flush the column, in the order of the points */
            int idx[4] = {kf, kmin, kmax, kl}, m = 0;
            for (int a = 0; a < 4; a++)
                for (int b = a + 1; b < 4; b++)
                    if (idx[b] < idx[a]) {
                        int t = idx[a];
                        idx[a] = idx[b], idx[b] = t;
                    }
            for (int a = 0; a < 4; a++) {
                if (a && idx[a] == idx[a - 1]) continue;
                X[m] = px0 + axis_pos(ax, s->x[idx[a]]) * pw;
                Y[m] = py1 - axis_pos(ay, s->y[idx[a]]) * L->ph;
                m++;
            }
            for (int a = 0; a < m; a++) g_line_point(g, X[a], Y[a]);
            have = 0;
        }
        if (!ok) { /* a break: the line ends here */
            if (k < s->n && g->npts) {
                g_line_end(g);
                g_line_begin(g, s->rgb, w);
            }
            continue;
        }
        if (!have) {
            have = 1, col = cc, kf = kmin = kmax = kl = k;
        } else {
            kl = k;
            if (s->y[k] < s->y[kmin]) kmin = k;
            if (s->y[k] > s->y[kmax]) kmax = k;
        }
    }
    g_line_end(g);
    if (s->markers) {
        int nm = 0;
        for (int k = 0; k < s->n; k++) nm += usable(s->x[k], s->y[k], P->log_y);
        if (nm <= CH_MAX_MARKERS)
            for (int k = 0; k < s->n; k++)
                if (usable(s->x[k], s->y[k], P->log_y))
                    g_dot(g, px0 + axis_pos(ax, s->x[k]) * pw,
                          py1 - axis_pos(ay, s->y[k]) * L->ph, w + 1.4, s->rgb);
    }
}

static void draw_chart(gfx *g, const attn_cli_chart *c, const layout *L) {
    double px0 = L->ml, pw = L->W - L->ml - L->mr, ph = L->ph;
    g_rect(g, 0, 0, L->W, L->H, 0xffffffu);
    if (c->title && c->title[0])
        g_text(g, L->W / 2.0, 30, c->title, 17, ANCHOR_MIDDLE, 0, 1, C_TEXT);
    for (int k = 0; k < L->nleg; k++) {
        const legend_entry *e = &L->leg[k];
        g_hline(g, e->x, e->x + 28, e->y, 2.5, e->s->rgb);
        if (e->s->markers) g_dot(g, e->x + 14, e->y, 3, e->s->rgb);
        g_text(g, e->x + 34, e->y + 4.5, e->s->label, 13, ANCHOR_START, 0, 0, C_TEXT);
    }
    for (int p = 0; p < c->npanels; p++) {
        const attn_cli_chart_panel *P = &c->panels[p];
        const axis *ay = &L->y[p];
        double top = L->panel_top[p], py1 = top + ph;
        if (P->caption && P->caption[0])
            g_text(g, px0, top - 7, P->caption, 13, ANCHOR_START, 0, 1, C_TEXT);
        if (P->note && P->note[0])
            g_text(g, px0 + pw, top - 7, P->note, 11, ANCHOR_END, 0, 0, C_NOTE);
        /* grid */
        for (int k = 0; k < ay->nt; k++) {
            double Y = py1 - axis_pos(ay, ay->t[k]) * ph;
            if (Y >= top - 0.5 && Y <= py1 + 0.5) g_hline(g, px0, px0 + pw, Y, 1, C_GRID);
        }
        for (int k = 0; k < L->x.nt; k++) {
            double X = px0 + axis_pos(&L->x, L->x.t[k]) * pw;
            if (X >= px0 - 0.5 && X <= px0 + pw + 0.5) g_vline(g, X, top, py1, 1, C_GRID);
        }
        /* tick labels */
        for (int k = 0; k < ay->nt; k++) {
            double Y = py1 - axis_pos(ay, ay->t[k]) * ph;
            g_hline(g, px0 - 5, px0, Y, 1, C_AXIS);
            g_text(g, px0 - 8, Y + 4.5, ay->lab[k], 12, ANCHOR_END, 0, 0, C_TICK);
        }
        for (int k = 0; k < L->x.nt; k++) {
            double X = px0 + axis_pos(&L->x, L->x.t[k]) * pw;
            g_vline(g, X, py1, py1 + 5, 1, C_AXIS);
            g_text(g, X, py1 + 19, L->x.lab[k], 12, ANCHOR_MIDDLE, 0, 0, C_TICK);
        }
        /* axes: left and bottom */
        g_vline(g, px0, top, py1 + 0.6, 1.2, C_AXIS);
        g_hline(g, px0 - 0.6, px0 + pw, py1, 1.2, C_AXIS);
        if (P->ylabel && P->ylabel[0])
            g_text(g, 20, top + ph / 2, P->ylabel, 13, ANCHOR_MIDDLE, 1, 0, C_TEXT);
        /* the data, clipped to the plot area (a little beyond, for the markers) */
        g_clip(g, p, px0 - 4, top - 4, pw + 8, ph + 8);
        for (int i = 0; i < P->nseries; i++) draw_series(g, L, p, P, &P->series[i]);
        g_unclip(g);
        if (P->nseries == 0 || L->y[p].nt == 0)
            g_text(g, px0 + pw / 2, top + ph / 2, "no data", 13, ANCHOR_MIDDLE, 0, 0, C_NOTE);
    }
    if (c->xlabel && c->xlabel[0]) {
        double last = L->panel_top[c->npanels - 1] + ph;
        g_text(g, px0 + pw / 2, last + 42, c->xlabel, 13, ANCHOR_MIDDLE, 0, 0, C_TEXT);
    }
}

attn_status attn_cli_chart_svg_text(attn_ctx *ctx, const attn_cli_chart *c, char **out,
                                    size_t *out_n) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out || !out_n, ctx, ATTN_E_INVALID, "chart: output is NULL");
    *out = NULL;
    *out_n = 0;
    ATTN_TRY(check_chart(ctx, c));
    gfx g;
    memset(&g, 0, sizeof g);
    g.svg = 1, g.s = 1;
    g.b.ctx = ctx;
    layout L;
    compute_layout(&g, c, &L);
    sb_printf(&g.b,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
              "font-size=\"13\">\n",
              L.W, L.H, L.W, L.H);
    draw_chart(&g, c, &L);
    sb_printf(&g.b, "</svg>\n");
    if (g.b.failed) {
        attn__free(ctx, g.b.p);
        return attn__fail(ctx, ATTN_E_NOMEM, "chart: out of memory");
    }
    *out = g.b.p;
    *out_n = g.b.n;
    return ATTN_OK;
}

attn_status attn_cli_chart_render(attn_ctx *ctx, const attn_cli_chart *c, int scale,
                                  attn_cli_canvas *out) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out, ctx, ATTN_E_INVALID, "chart: output is NULL");
    out->px = NULL;
    out->w = out->h = 0;
    ATTN_TRY(check_chart(ctx, c));
    ATTN_FAIL_IF(scale < 1 || scale > 4, ctx, ATTN_E_INVALID, "chart: scale %d outside 1..4",
                 scale);
    gfx g;
    memset(&g, 0, sizeof g);
    g.s = scale;
    layout L;
    compute_layout(&g, c, &L);
    int W = L.W * scale, H = L.H * scale;
    ATTN_FAIL_IF(W > ATTN_CLI_PNG_MAX_DIM || H > ATTN_CLI_PNG_MAX_DIM, ctx, ATTN_E_INVALID,
                 "chart: %d x %d pixels is over the limit of %d", W, H, ATTN_CLI_PNG_MAX_DIM);
    size_t npx, nbytes;
    if (!attn__mul_size((size_t)W, (size_t)H, &npx) || !attn__mul_size(npx, 3, &nbytes))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "chart: %d x %d picture overflows", W, H);
    g.cv.w = W, g.cv.h = H;
    g.cv.px = attn__malloc(ctx, nbytes);
    g.mask = attn__calloc(ctx, npx, 1);
    if (!g.cv.px || !g.mask) {
        attn__free(ctx, g.cv.px);
        attn__free(ctx, g.mask);
        return attn__fail(ctx, ATTN_E_NOMEM, "chart: out of memory (%zu bytes)", nbytes + npx);
    }
    draw_chart(&g, c, &L);
    attn__free(ctx, g.mask);
    *out = g.cv;
    return ATTN_OK;
}

attn_status attn_cli_chart_png_data(attn_ctx *ctx, const attn_cli_chart *c, unsigned char **out,
                                    size_t *out_n) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!out || !out_n, ctx, ATTN_E_INVALID, "chart: output is NULL");
    *out = NULL;
    *out_n = 0;
    attn_cli_canvas cv;
    ATTN_TRY(attn_cli_chart_render(ctx, c, 2, &cv));
    attn_status st = attn_cli_png_encode(ctx, cv.w, cv.h, cv.px, ATTN_CLI_ZLIB_FIXED, out, out_n);
    attn__free(ctx, cv.px);
    return st;
}

attn_status attn_cli_chart_write(attn_ctx *ctx, const char *path, int png,
                                 const attn_cli_chart *c) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "chart: output path is NULL or empty");
    void *data = NULL;
    size_t n = 0;
    if (png) ATTN_TRY(attn_cli_chart_png_data(ctx, c, (unsigned char **)&data, &n));
    else ATTN_TRY(attn_cli_chart_svg_text(ctx, c, (char **)&data, &n));
    attn_status st = attn_cli_write_file(ctx, path, data, n);
    attn__free(ctx, data);
    return st;
}
