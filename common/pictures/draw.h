/* The parts of the CLI's pictures (pictures.h): a PNG encoder (zlib/deflate, CRC-32 and
 * Adler-32 of our own), an RGB canvas with a built-in 5x9 bitmap font, the heatmap and the loss
 * chart in memory.  They use the library's internal helpers (src/core: attn__fail, the context
 * allocator, attn__file_write), so the CLI and test_viz build them with src/core on the include
 * path and link the static library; the commands include only pictures.h. */
#ifndef ATTN_CLI_DRAW_H
#define ATTN_CLI_DRAW_H
#include "internal.h"
#include "pictures.h"

/* ---- checksums ------------------------------------------------------------------------- */
/* CRC-32 (ISO-HDLC, as in PNG and gzip), continuing from crc (start with 0). */
uint32_t attn_cli_crc32(uint32_t crc, const void *data, size_t n);
/* Adler-32 (zlib), continuing from adler (start with 1). */
uint32_t attn_cli_adler32(uint32_t adler, const void *data, size_t n);

/* ---- zlib ------------------------------------------------------------------------------ */
enum {
    ATTN_CLI_ZLIB_STORED = 0, /* stored (uncompressed) deflate blocks only */
    ATTN_CLI_ZLIB_FIXED = 1   /* LZ77 + fixed Huffman codes; falls back to stored when larger */
};
/* A zlib stream (RFC 1950) of in[0..n): the 2-byte header, deflate (RFC 1951) blocks and the
 * Adler-32.  *out is allocated with the context allocator (release with attn__free). */
attn_status attn_cli_zlib_compress(attn_ctx *ctx, const unsigned char *in, size_t n, int mode,
                                   unsigned char **out /* OUT */, size_t *out_n /* OUT */);

/* ---- PNG ------------------------------------------------------------------------------- */
/* Largest width or height accepted (pixels). */
#define ATTN_CLI_PNG_MAX_DIM 16384
/* PNG image of rgb [height, width, 3] (8-bit truecolour, no interlace) in memory; mode as
 * attn_cli_zlib_compress.  Each row gets the PNG filter (None/Sub/Up/Average/Paeth) with the
 * smallest sum of absolute values. */
attn_status attn_cli_png_encode(attn_ctx *ctx, int width, int height, const unsigned char *rgb,
                                int mode, unsigned char **out /* OUT */,
                                size_t *out_n /* OUT */);
/* Writes bytes to a file atomically (attn__file_write: a failed write leaves it as it was). */
attn_status attn_cli_write_file(attn_ctx *ctx, const char *path, const void *data, size_t n);

/* ---- canvas and font ------------------------------------------------------------------- */
typedef struct attn_cli_canvas {
    int w, h;
    unsigned char *px; /* [h, w, 3] */
} attn_cli_canvas;

#define ATTN_CLI_FONT_W 5     /* glyph bitmap width */
#define ATTN_CLI_FONT_H 9     /* rows: 7 above the baseline (capitals), 2 for descenders */
#define ATTN_CLI_FONT_ADV 6   /* horizontal advance per character (unscaled) */
#define ATTN_CLI_FONT_LINE 10 /* line height (unscaled) */
/* The glyph drawn for the code ATTN_CLI_GLYPH_SPACE_DOT: a centred dot, used to show spaces. */
#define ATTN_CLI_GLYPH_SPACE_DOT 0x7f

/* 9 rows of 5 bits (bit 4 = leftmost column) for a character: printable ASCII 32..126,
 * ATTN_CLI_GLYPH_SPACE_DOT, anything else '?'. */
const unsigned char *attn_cli_font_glyph(int c);
/* Fills a rectangle (clipped to the canvas). */
void attn_cli_fill_rect(attn_cli_canvas *cv, int x, int y, int w, int h,
                        const unsigned char rgb[3]);
/* Draws text with its top-left corner at (x, y), each font pixel scale x scale; vertical =
 * 1 turns it 90 degrees counter-clockwise (reads bottom to top, (x, y) is then the bottom-left
 * corner).  show_space draws ' ' as a centred dot.  Clipped to the canvas. */
void attn_cli_draw_text(attn_cli_canvas *cv, int x, int y, const char *s, int scale,
                        int vertical, int show_space, const unsigned char rgb[3]);
/* Width in pixels of text at a scale (no trailing gap). */
int attn_cli_text_width(const char *s, int scale);

/* Viridis-like perceptual colour map: t in [0, 1] (clamped) -> RGB. */
void attn_cli_colormap(float t, unsigned char rgb[3]);

/* ---- charts ---------------------------------------------------------------------------- */
/* The heatmap picture in memory (see attn_cli_heatmap_png); px allocated with the context
 * allocator. */
attn_status attn_cli_heatmap_render(attn_ctx *ctx, const float *weights, int rows, int cols,
                                    const char *const *row_labels,
                                    const char *const *col_labels, const char *title,
                                    attn_cli_canvas *out /* OUT */);
/* The panels picture in memory (see attn_cli_panels_png); px allocated with the context
 * allocator. */
attn_status attn_cli_panels_render(attn_ctx *ctx, const attn_cli_panel *panels, int n, int size,
                                   const char *title, attn_cli_canvas *out /* OUT */);

/* The chart (pictures.h: attn_cli_chart) as SVG text (NUL-terminated) or as a PNG image in
 * memory, allocated with the context allocator; and drawn on a canvas, scale pixels per SVG
 * unit (1..4; px allocated with the context allocator). */
attn_status attn_cli_chart_svg_text(attn_ctx *ctx, const attn_cli_chart *c, char **out /* OUT */,
                                    size_t *out_n /* OUT */);
attn_status attn_cli_chart_png_data(attn_ctx *ctx, const attn_cli_chart *c,
                                    unsigned char **out /* OUT */, size_t *out_n /* OUT */);
attn_status attn_cli_chart_render(attn_ctx *ctx, const attn_cli_chart *c, int scale,
                                  attn_cli_canvas *out /* OUT */);

#endif
