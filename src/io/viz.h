/* Pictures without dependencies: a PNG encoder (zlib/deflate, CRC-32 and Adler-32 of our own),
 * an RGB canvas with a built-in 5x9 bitmap font, an attention heatmap (PNG) and a loss curve
 * (SVG).  Internal: the public wrappers are attn_png_write, attn_heatmap_png and
 * attn_loss_curve_svg. */
#ifndef ATTN_IO_VIZ_H
#define ATTN_IO_VIZ_H
#include "internal.h"

/* ---- checksums ------------------------------------------------------------------------- */
/* CRC-32 (ISO-HDLC, as in PNG and gzip), continuing from crc (start with 0). */
ATTN__HIDDEN uint32_t attn__crc32(uint32_t crc, const void *data, size_t n);
/* Adler-32 (zlib), continuing from adler (start with 1). */
ATTN__HIDDEN uint32_t attn__adler32(uint32_t adler, const void *data, size_t n);

/* ---- zlib ------------------------------------------------------------------------------ */
enum {
    ATTN__ZLIB_STORED = 0, /* stored (uncompressed) deflate blocks only */
    ATTN__ZLIB_FIXED = 1   /* LZ77 + fixed Huffman codes; falls back to stored when larger */
};
/* A zlib stream (RFC 1950) of in[0..n): the 2-byte header, deflate (RFC 1951) blocks and the
 * Adler-32.  *out is allocated with the context allocator (release with attn__free). */
ATTN__HIDDEN attn_status attn__zlib_compress(attn_ctx *ctx, const unsigned char *in, size_t n,
                                             int mode, unsigned char **out /* OUT */,
                                             size_t *out_n /* OUT */);

/* ---- PNG ------------------------------------------------------------------------------- */
/* Largest width or height accepted (pixels). */
#define ATTN__PNG_MAX_DIM 16384
/* PNG image of rgb [height, width, 3] (8-bit truecolour, no interlace) in memory; mode as
 * attn__zlib_compress.  Each row gets the PNG filter (None/Sub/Up/Average/Paeth) with the
 * smallest sum of absolute values. */
ATTN__HIDDEN attn_status attn__png_encode(attn_ctx *ctx, int width, int height,
                                          const unsigned char *rgb, int mode,
                                          unsigned char **out /* OUT */,
                                          size_t *out_n /* OUT */);
/* Writes bytes to a file atomically (attn__file_write: a failed write leaves it as it was). */
ATTN__HIDDEN attn_status attn__write_file(attn_ctx *ctx, const char *path, const void *data,
                                          size_t n);
ATTN__HIDDEN attn_status attn__png_write(attn_ctx *ctx, const char *path, int width, int height,
                                         const unsigned char *rgb);

/* ---- canvas and font ------------------------------------------------------------------- */
typedef struct attn__canvas {
    int w, h;
    unsigned char *px; /* [h, w, 3] */
} attn__canvas;

#define ATTN__FONT_W 5     /* glyph bitmap width */
#define ATTN__FONT_H 9     /* rows: 7 above the baseline (capitals), 2 for descenders */
#define ATTN__FONT_ADV 6   /* horizontal advance per character (unscaled) */
#define ATTN__FONT_LINE 10 /* line height (unscaled) */
/* The glyph drawn for the code ATTN__GLYPH_SPACE_DOT: a centred dot, used to show spaces. */
#define ATTN__GLYPH_SPACE_DOT 0x7f

/* 9 rows of 5 bits (bit 4 = leftmost column) for a character: printable ASCII 32..126,
 * ATTN__GLYPH_SPACE_DOT, anything else '?'. */
ATTN__HIDDEN const unsigned char *attn__font_glyph(int c);
/* Fills a rectangle (clipped to the canvas). */
ATTN__HIDDEN void attn__fill_rect(attn__canvas *cv, int x, int y, int w, int h,
                                  const unsigned char rgb[3]);
/* Draws text with its top-left corner at (x, y), each font pixel scale x scale; vertical =
 * 1 turns it 90 degrees counter-clockwise (reads bottom to top, (x, y) is then the bottom-left
 * corner).  show_space draws ' ' as a centred dot.  Clipped to the canvas. */
ATTN__HIDDEN void attn__draw_text(attn__canvas *cv, int x, int y, const char *s, int scale,
                                  int vertical, int show_space, const unsigned char rgb[3]);
/* Width in pixels of text at a scale (no trailing gap). */
ATTN__HIDDEN int attn__text_width(const char *s, int scale);

/* Viridis-like perceptual colour map: t in [0, 1] (clamped) -> RGB. */
ATTN__HIDDEN void attn__colormap(float t, unsigned char rgb[3]);

/* ---- charts ---------------------------------------------------------------------------- */
/* The heatmap picture in memory (see attn_heatmap_png); rgb allocated with the context
 * allocator. */
ATTN__HIDDEN attn_status attn__heatmap_render(attn_ctx *ctx, const float *weights, int rows,
                                              int cols, const char *const *row_labels,
                                              const char *const *col_labels,
                                              const char *title, attn__canvas *out /* OUT */);
ATTN__HIDDEN attn_status attn__heatmap_png(attn_ctx *ctx, const char *path,
                                           const float *weights, int rows, int cols,
                                           const char *const *row_labels,
                                           const char *const *col_labels, const char *title);
/* The SVG text of a loss chart (see attn_loss_curve_svg), NUL-terminated, allocated with the
 * context allocator. */
ATTN__HIDDEN attn_status attn__loss_curve_svg_text(attn_ctx *ctx, const float *steps,
                                                   const float *train_loss, int n,
                                                   const float *val_steps,
                                                   const float *val_loss, int nval, const char *val_label,
                                                   const char *title, char **out /* OUT */,
                                                   size_t *out_n /* OUT */);
ATTN__HIDDEN attn_status attn__loss_curve_svg(attn_ctx *ctx, const char *path,
                                              const float *steps, const float *train_loss,
                                              int n, const float *val_steps,
                                              const float *val_loss, int nval, const char *val_label,
                                              const char *title);

#endif
