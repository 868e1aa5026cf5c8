/* Pictures: CRC-32, Adler-32, the zlib/deflate encoder (checked by a small inflater written
 * here: stored and fixed-Huffman blocks, which is all the encoder emits), the PNG encoder
 * (chunks, CRCs, filters undone back to the pixels), the font, the colour map, the heatmap and
 * the SVG loss curve. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/pictures/draw.h"
#include "testutil.h"

static attn_ctx *ctx;

/* ---- a minimal inflater (RFC 1951 stored + fixed blocks) ------------------------------- */
typedef struct inb {
    const unsigned char *p;
    size_t n, pos;
    unsigned bitbuf;
    int bitcnt, err;
    unsigned char *out;
    size_t on, ocap;
} inb;

static int getbit(inb *s) {
    if (!s->bitcnt) {
        if (s->pos >= s->n) {
            s->err = 1;
            return 0;
        }
        s->bitbuf = s->p[s->pos++];
        s->bitcnt = 8;
    }
    int b = (int)(s->bitbuf & 1);
    s->bitbuf >>= 1;
    s->bitcnt--;
    return b;
}
static unsigned getbits(inb *s, int n) { /* LSB first */
    unsigned v = 0;
    for (int i = 0; i < n; i++) v |= (unsigned)getbit(s) << i;
    return v;
}
static unsigned getcode(inb *s, int n) { /* Huffman: MSB first */
    unsigned v = 0;
    for (int i = 0; i < n; i++) v = (v << 1) | (unsigned)getbit(s);
    return v;
}
static void emit(inb *s, unsigned char c) {
    if (s->on == s->ocap) {
        s->ocap = s->ocap ? s->ocap * 2 : 1024;
        s->out = realloc(s->out, s->ocap);
    }
    s->out[s->on++] = c;
}
static int fixed_sym(inb *s) {
    unsigned c = getcode(s, 7);
    if (c <= 0x17) return 256 + (int)c;
    c = (c << 1) | (unsigned)getbit(s);
    if (c >= 0x30 && c <= 0xBF) return (int)(c - 0x30);
    if (c >= 0xC0 && c <= 0xC7) return 280 + (int)(c - 0xC0);
    c = (c << 1) | (unsigned)getbit(s);
    if (c >= 0x190 && c <= 0x1FF) return 144 + (int)(c - 0x190);
    s->err = 1;
    return 256;
}
/* Inflates a raw deflate stream; returns 0 on error.  *used = bytes consumed. */
static int inflate_raw(const unsigned char *p, size_t n, unsigned char **out, size_t *on,
                       size_t *used, int *nstored, int *nfixed) {
    static const int lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const int lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const int dbase[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                  33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                  1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static const int dext[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,
                                 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    inb s = {p, n, 0, 0, 0, 0, NULL, 0, 0};
    int last = 0;
    *nstored = *nfixed = 0;
    while (!last && !s.err) {
        last = getbit(&s);
        unsigned type = getbits(&s, 2);
        if (type == 0) {
            (*nstored)++;
            s.bitcnt = 0; /* to a byte boundary */
            if (s.pos + 4 > n) return 0;
            unsigned len = p[s.pos] | p[s.pos + 1] << 8, nlen = p[s.pos + 2] | p[s.pos + 3] << 8;
            s.pos += 4;
            if ((len ^ 0xFFFFu) != nlen || s.pos + len > n) return 0;
            for (unsigned i = 0; i < len; i++) emit(&s, p[s.pos + i]);
            s.pos += len;
        } else if (type == 1) {
            (*nfixed)++;
            for (;;) {
                int sym = fixed_sym(&s);
                if (s.err) break;
                if (sym < 256) {
                    emit(&s, (unsigned char)sym);
                    continue;
                }
                if (sym == 256) break;
                sym -= 257;
                if (sym >= 29) return 0;
                int len = lbase[sym] + (int)getbits(&s, lext[sym]);
                int dsym = (int)getcode(&s, 5);
                if (dsym >= 30) return 0;
                size_t dist = (size_t)dbase[dsym] + getbits(&s, dext[dsym]);
                if (dist > s.on || dist > 32768) return 0;
                for (int i = 0; i < len; i++) emit(&s, s.out[s.on - dist]);
            }
        } else {
            return 0; /* the encoder never writes dynamic blocks */
        }
    }
    if (s.err) {
        free(s.out);
        return 0;
    }
    *out = s.out;
    *on = s.on;
    *used = s.pos;
    return 1;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks a zlib stream and returns its decompressed bytes (malloc) or NULL. */
static unsigned char *unzlib(const unsigned char *z, size_t zn, size_t *n, int *nstored,
                             int *nfixed) {
    if (zn < 6 || (z[0] & 15) != 8 || ((unsigned)z[0] << 8 | z[1]) % 31 != 0 || (z[1] & 32))
        return NULL;
    unsigned char *out = NULL;
    size_t on = 0, used = 0;
    if (!inflate_raw(z + 2, zn - 6, &out, &on, &used, nstored, nfixed)) return NULL;
    if (used != zn - 6 || be32(z + zn - 4) != attn_cli_adler32(1, out, on)) {
        free(out);
        return NULL;
    }
    *n = on;
    return out ? out : malloc(1);
}

/* ---- checksums ------------------------------------------------------------------------- */
static uint32_t naive_adler(const unsigned char *p, size_t n) {
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + p[i]) % 65521;
        b = (b + a) % 65521;
    }
    return b << 16 | a;
}
static uint32_t naive_crc(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void test_checksums(void) {
    TU_CHECK(attn_cli_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 check value");
    TU_CHECK(attn_cli_crc32(0, "", 0) == 0, "crc32 of nothing");
    TU_CHECK(attn_cli_crc32(0, "IEND", 4) == 0xAE426082u, "crc32 of IEND");
    TU_CHECK(attn_cli_adler32(1, "Wikipedia", 9) == 0x11E60398u, "adler32 of Wikipedia");
    TU_CHECK(attn_cli_adler32(1, "", 0) == 1, "adler32 of nothing");
    size_t n = 200000;
    unsigned char *b = malloc(n);
    uint64_t st = 7;
    for (size_t i = 0; i < n; i++) b[i] = (i % 3 == 0) ? 0xFF : (unsigned char)tu_rand(&st);
    TU_CHECK(attn_cli_adler32(1, b, n) == naive_adler(b, n), "adler32 long input");
    TU_CHECK(attn_cli_crc32(0, b, n) == naive_crc(b, n), "crc32 long input");
    /* continuing over pieces gives the same value */
    uint32_t a = attn_cli_adler32(1, b, 777), c = attn_cli_crc32(0, b, 777);
    a = attn_cli_adler32(a, b + 777, n - 777);
    c = attn_cli_crc32(c, b + 777, n - 777);
    TU_CHECK(a == naive_adler(b, n) && c == naive_crc(b, n), "checksums in pieces");
    free(b);
}

/* ---- zlib ------------------------------------------------------------------------------ */
static void roundtrip(const char *what, const unsigned char *in, size_t n, int mode,
                      size_t *zsize, int *nstored, int *nfixed) {
    unsigned char *z = NULL;
    size_t zn = 0;
    if (!TU_STATUS(attn_cli_zlib_compress(ctx, in, n, mode, &z, &zn), ATTN_OK, ctx)) return;
    size_t on = 0;
    unsigned char *out = unzlib(z, zn, &on, nstored, nfixed);
    TU_CHECK(out != NULL, "%s (mode %d): stream does not inflate", what, mode);
    if (out) TU_CHECK(on == n && (n == 0 || memcmp(out, in, n) == 0), "%s (mode %d): bytes differ", what, mode);
    if (zsize) *zsize = zn;
    free(out);
    attn__free(ctx, z);
}

static void test_zlib(void) {
    size_t n = 300000;
    unsigned char *b = malloc(n);
    uint64_t st = 11;
    int ns, nf;
    size_t zn;
    /* empty and tiny inputs */
    roundtrip("empty", b, 0, ATTN_CLI_ZLIB_STORED, &zn, &ns, &nf);
    TU_CHECK(ns == 1 && nf == 0 && zn == 11, "empty stored stream: %d blocks, %zu bytes", ns, zn);
    roundtrip("empty", b, 0, ATTN_CLI_ZLIB_FIXED, NULL, &ns, &nf);
    b[0] = 'x';
    roundtrip("one byte", b, 1, ATTN_CLI_ZLIB_FIXED, NULL, &ns, &nf);
    /* stored: several blocks of at most 65535 bytes */
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)tu_rand(&st);
    roundtrip("random stored", b, n, ATTN_CLI_ZLIB_STORED, &zn, &ns, &nf);
    TU_CHECK(ns == 5 && nf == 0 && zn == n + 5 * 5 + 6, "stored: %d blocks, %zu bytes", ns, zn);
    /* random data does not compress: the fixed mode falls back to stored blocks */
    roundtrip("random fixed", b, n, ATTN_CLI_ZLIB_FIXED, &zn, &ns, &nf);
    TU_CHECK(nf == 0 && ns == 5, "random data: expected the stored fallback");
    /* runs, repeats at every distance up to the 32K window, text */
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i / 1000);
    roundtrip("runs", b, n, ATTN_CLI_ZLIB_FIXED, &zn, &ns, &nf);
    TU_CHECK(nf == 1 && zn < n / 50, "runs: %zu bytes from %zu (fixed blocks %d)", zn, n, nf);
    for (size_t i = 0; i < 32768; i++) b[i] = (unsigned char)tu_rand(&st);
    for (size_t i = 32768; i < 100000; i++) b[i] = b[i - 32768];
    roundtrip("window repeat", b, 100000, ATTN_CLI_ZLIB_FIXED, &zn, &ns, &nf);
    TU_CHECK(nf == 1 && zn < 60000, "window repeat: %zu bytes", zn);
    for (size_t i = 0; i < 50000; i++) {
        size_t span = 3 + tu_rand(&st) % 300, d = 1 + tu_rand(&st) % 30000;
        for (size_t k = 0; k < span && i < 50000; k++, i++)
            b[i] = i >= d ? b[i - d] : (unsigned char)tu_rand(&st);
    }
    roundtrip("mixed distances", b, 50000, ATTN_CLI_ZLIB_FIXED, NULL, &ns, &nf);
    const char *text = "the 3rd of may 1999 -> 1999-05-03; saturday, november 21, 2026 -> ";
    size_t tl = strlen(text);
    for (size_t i = 0; i < 20000; i++) b[i] = (unsigned char)text[(i * 7 + i / tl) % tl];
    roundtrip("text", b, 20000, ATTN_CLI_ZLIB_FIXED, NULL, &ns, &nf);
    for (size_t len = 2; len < 600; len += 37) { /* short inputs around MIN/MAX match */
        for (size_t i = 0; i < len; i++) b[i] = (unsigned char)"abcab"[i % 5];
        roundtrip("short", b, len, ATTN_CLI_ZLIB_FIXED, NULL, &ns, &nf);
    }
    free(b);
    unsigned char *z;
    size_t zz;
    TU_STATUS(attn_cli_zlib_compress(ctx, NULL, 5, 1, &z, &zz), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_zlib_compress(ctx, (const unsigned char *)"a", 1, 7, &z, &zz),
              ATTN_E_INVALID, ctx);
}

/* ---- PNG ------------------------------------------------------------------------------- */
static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

/* Decodes our PNG (truecolour 8-bit): checks the signature, every chunk's CRC, the chunk
 * order and the zlib stream; returns the pixels (malloc) or NULL. */
static unsigned char *png_decode(const unsigned char *p, size_t n, int *w, int *h,
                                 int filters_seen[5]) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n < 8 || memcmp(p, sig, 8) != 0) return NULL;
    size_t pos = 8, zn = 0;
    unsigned char *z = NULL;
    int nchunk = 0, have_end = 0;
    *w = *h = 0;
    while (pos + 12 <= n && !have_end) {
        uint32_t len = be32(p + pos);
        if (len > n - pos - 12) break;
        const unsigned char *type = p + pos + 4, *data = p + pos + 8;
        TU_CHECK(be32(data + len) == naive_crc(type, len + 4), "png: chunk %.4s CRC", type);
        if (nchunk == 0) {
            TU_CHECK(memcmp(type, "IHDR", 4) == 0 && len == 13, "png: IHDR first");
            *w = (int)be32(data);
            *h = (int)be32(data + 4);
            TU_CHECK(data[8] == 8 && data[9] == 2 && !data[10] && !data[11] && !data[12],
                     "png: IHDR fields");
        } else if (memcmp(type, "IDAT", 4) == 0) {
            z = realloc(z, zn + len + 1);
            memcpy(z + zn, data, len);
            zn += len;
        } else if (memcmp(type, "IEND", 4) == 0) {
            TU_CHECK(len == 0, "png: IEND length");
            have_end = 1;
        }
        nchunk++;
        pos += 12 + len;
    }
    TU_CHECK(have_end && pos == n, "png: IEND last and nothing after");
    int ns, nf;
    size_t rn = 0;
    unsigned char *raw = z ? unzlib(z, zn, &rn, &ns, &nf) : NULL;
    free(z);
    if (!raw || *w <= 0 || *h <= 0 || rn != ((size_t)*w * 3 + 1) * (size_t)*h) {
        free(raw);
        return NULL;
    }
    size_t stride = (size_t)*w * 3;
    unsigned char *px = malloc(stride * (size_t)*h);
    for (int y = 0; y < *h; y++) {
        const unsigned char *row = raw + (size_t)y * (stride + 1);
        int f = row[0];
        if (f > 4) {
            free(raw);
            free(px);
            return NULL;
        }
        filters_seen[f]++;
        unsigned char *cur = px + (size_t)y * stride, *up = y ? cur - stride : NULL;
        for (size_t i = 0; i < stride; i++) {
            int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
            int pred = f == 1 ? a : f == 2 ? b : f == 3 ? (a + b) / 2 : f == 4 ? paeth(a, b, c) : 0;
            cur[i] = (unsigned char)(row[1 + i] + pred);
        }
    }
    free(raw);
    return px;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static void test_png(void) {
    const int W = 61, H = 37;
    unsigned char *img = malloc((size_t)W * H * 3);
    uint64_t st = 5;
    /* regions that favour different filters: flat, horizontal and vertical ramps, noise */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            unsigned char *p = img + ((size_t)y * W + x) * 3;
            if (y < 9) p[0] = p[1] = p[2] = 200;
            else if (y < 18) p[0] = (unsigned char)(x * 4), p[1] = (unsigned char)(x * 3), p[2] = 9;
            else if (y < 27) p[0] = (unsigned char)(y * 7), p[1] = (unsigned char)(x * 2 + y), p[2] = (unsigned char)(x ^ y);
            else p[0] = (unsigned char)tu_rand(&st), p[1] = (unsigned char)tu_rand(&st), p[2] = (unsigned char)tu_rand(&st);
        }
    for (int mode = 0; mode < 2; mode++) {
        unsigned char *png = NULL;
        size_t n = 0;
        if (!TU_STATUS(attn_cli_png_encode(ctx, W, H, img, mode, &png, &n), ATTN_OK, ctx)) continue;
        int w, h, seen[5] = {0};
        unsigned char *px = png_decode(png, n, &w, &h, seen);
        TU_CHECK(px && w == W && h == H, "png mode %d: decode failed", mode);
        if (px) TU_CHECK(memcmp(px, img, (size_t)W * H * 3) == 0, "png mode %d: pixels differ", mode);
        int kinds = 0;
        for (int f = 0; f < 5; f++) kinds += seen[f] > 0;
        TU_CHECK(kinds >= 3, "png: only %d filter kinds used", kinds);
        free(px);
        attn__free(ctx, png);
    }
    /* 1x1 and a wide image */
    unsigned char one[3] = {1, 2, 3};
    unsigned char *png;
    size_t n;
    if (TU_STATUS(attn_cli_png_encode(ctx, 1, 1, one, 1, &png, &n), ATTN_OK, ctx)) {
        int w, h, seen[5] = {0};
        unsigned char *px = png_decode(png, n, &w, &h, seen);
        TU_CHECK(px && w == 1 && h == 1 && px[0] == 1 && px[1] == 2 && px[2] == 3, "png 1x1");
        free(px);
        attn__free(ctx, png);
    }
    /* file output matches the memory encoding */
    const char *path = "test_viz_tmp.png";
    if (TU_STATUS(attn_cli_png_write(ctx, path, W, H, img), ATTN_OK, ctx)) {
        size_t fn = 0;
        unsigned char *f = read_all(path, &fn);
        attn_cli_png_encode(ctx, W, H, img, ATTN_CLI_ZLIB_FIXED, &png, &n);
        TU_CHECK(f && fn == n && memcmp(f, png, n) == 0, "png file differs from memory");
        free(f);
        attn__free(ctx, png);
        remove(path);
    }
    /* errors */
    TU_STATUS(attn_cli_png_encode(ctx, 0, 5, img, 1, &png, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_png_encode(ctx, 5, -1, img, 1, &png, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_png_encode(ctx, ATTN_CLI_PNG_MAX_DIM + 1, 1, img, 1, &png, &n), ATTN_E_INVALID,
              ctx);
    TU_STATUS(attn_cli_png_encode(ctx, 5, 5, NULL, 1, &png, &n), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_png_write(ctx, NULL, W, H, img), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_png_write(ctx, "no/such/dir/x.png", W, H, img), ATTN_E_IO, ctx);
    TU_CHECK(strstr(attn_ctx_errmsg(ctx), "no/such/dir") != NULL, "png: message names path");
    TU_CHECK(attn_cli_png_write(NULL, path, W, H, img) == ATTN_E_INVALID, "png: NULL ctx");
    free(img);
}

/* ---- font and colour map --------------------------------------------------------------- */
static void test_font_colormap(void) {
    int blank = 0, dup = 0;
    for (int c = 32; c <= 127; c++) {
        int code = c == 127 ? ATTN_CLI_GLYPH_SPACE_DOT : c;
        const unsigned char *g = attn_cli_font_glyph(code);
        int ink = 0;
        for (int r = 0; r < ATTN_CLI_FONT_H; r++) {
            TU_CHECK(g[r] < 32, "glyph %d row %d wider than 5", c, r);
            ink += g[r] != 0;
        }
        blank += ink == 0;
        for (int d = 33; d < c; d++)
            dup += memcmp(g, attn_cli_font_glyph(d), ATTN_CLI_FONT_H) == 0;
    }
    TU_CHECK(blank == 1, "%d blank glyphs (only space should be)", blank);
    TU_CHECK(dup == 0, "%d pairs of identical glyphs", dup);
    TU_CHECK(attn_cli_font_glyph(200) == attn_cli_font_glyph('?'), "unknown -> '?'");
    TU_CHECK(attn_cli_text_width("abc", 2) == (3 * 6 - 1) * 2 && attn_cli_text_width("", 1) == 0,
             "text width");
    double prev = -1;
    for (int i = 0; i <= 100; i++) {
        unsigned char c[3];
        attn_cli_colormap(i / 100.0f, c);
        double lum = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
        TU_CHECK(lum > prev, "colour map lightness not increasing at %d", i);
        prev = lum;
    }
    unsigned char a[3], b[3];
    attn_cli_colormap(-5, a);
    attn_cli_colormap(0, b);
    TU_CHECK(memcmp(a, b, 3) == 0, "colour map clamps below");
    attn_cli_colormap(NAN, a);
    TU_CHECK(memcmp(a, b, 3) == 0, "colour map NaN -> 0");
}

/* ---- heatmap --------------------------------------------------------------------------- */
static size_t count_colour(const attn_cli_canvas *cv, const unsigned char c[3]) {
    size_t k = 0;
    for (size_t i = 0; i < (size_t)cv->w * cv->h; i++) k += memcmp(cv->px + 3 * i, c, 3) == 0;
    return k;
}

static void test_heatmap(void) {
    enum { R = 11, C = 27 };
    float w[R * C];
    const char *in = "saturday, november 21, 2026", *outs = "2026-11-21";
    char cl[C][2], rl[R][8];
    const char *clp[C], *rlp[R];
    for (int c = 0; c < C; c++) cl[c][0] = in[c], cl[c][1] = 0, clp[c] = cl[c];
    for (int r = 0; r < R; r++) {
        if (r < 10) rl[r][0] = outs[r], rl[r][1] = 0;
        else strcpy(rl[r], "<eos>");
        rlp[r] = rl[r];
        for (int c = 0; c < C; c++) w[r * C + c] = c == (r * 2) % C ? 1.0f : 0.0f;
    }
    attn_cli_canvas cv;
    if (TU_STATUS(attn_cli_heatmap_render(ctx, w, R, C, rlp, clp, "cross-attention", &cv), ATTN_OK,
                  ctx)) {
        TU_CHECK(cv.w > C * 20 && cv.h > R * 20 && cv.w < 2000 && cv.h < 1000, "size %d x %d",
                 cv.w, cv.h);
        unsigned char hot[3], cold[3];
        attn_cli_colormap(1, hot);
        attn_cli_colormap(0, cold);
        /* one bright cell per row (at least 20x20 px each), the rest dark */
        size_t nh = count_colour(&cv, hot), nc = count_colour(&cv, cold);
        TU_CHECK(nh >= (size_t)R * 400, "bright pixels %zu", nh);
        TU_CHECK(nc >= (size_t)R * (C - 1) * 400, "dark pixels %zu", nc);
        static const unsigned char text[3] = {34, 34, 34};
        TU_CHECK(count_colour(&cv, text) > 500, "labels drawn");
        attn__free(ctx, cv.px);
    }
    /* without labels or title; one cell; large maps get small cells */
    if (TU_STATUS(attn_cli_heatmap_render(ctx, w, 1, 1, NULL, NULL, NULL, &cv), ATTN_OK, ctx))
        attn__free(ctx, cv.px);
    float *big = calloc(300 * 200, sizeof(float));
    big[5] = -2.0f; /* outside [0, 1]: the range becomes min..max */
    if (TU_STATUS(attn_cli_heatmap_render(ctx, big, 300, 200, NULL, NULL, "big", &cv), ATTN_OK, ctx)) {
        TU_CHECK(cv.w < 2000 && cv.h < 1500, "big map %d x %d", cv.w, cv.h);
        attn__free(ctx, cv.px);
    }
    free(big);
    const char *path = "test_viz_heatmap.png";
    if (TU_STATUS(attn_cli_heatmap_png(ctx, path, w, R, C, rlp, clp, "t"), ATTN_OK, ctx)) {
        size_t n = 0;
        unsigned char *f = read_all(path, &n);
        int pw, ph, seen[5] = {0};
        unsigned char *px = f ? png_decode(f, n, &pw, &ph, seen) : NULL;
        TU_CHECK(px != NULL, "heatmap file is a valid PNG");
        free(px);
        free(f);
        remove(path);
    }
    /* errors */
    TU_STATUS(attn_cli_heatmap_render(ctx, NULL, 2, 2, NULL, NULL, NULL, &cv), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_heatmap_render(ctx, w, 0, 2, NULL, NULL, NULL, &cv), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_heatmap_render(ctx, w, 2, 5000, NULL, NULL, NULL, &cv), ATTN_E_INVALID, ctx);
    w[3] = NAN;
    TU_STATUS(attn_cli_heatmap_render(ctx, w, R, C, NULL, NULL, NULL, &cv), ATTN_E_NONFINITE, ctx);
    TU_STATUS(attn_cli_heatmap_png(ctx, "", w, R, C, NULL, NULL, NULL), ATTN_E_INVALID, ctx);
}

/* ---- panels ---------------------------------------------------------------------------- */
static void test_panels(void) {
    enum { S = 40 };
    float img[4 * 4], heat[2 * 2] = {0, 1, 2, 3};
    for (int i = 0; i < 16; i++) img[i] = (float)(i * 17);
    attn_cli_panel p[2] = {{img, 4, 4, 1, 0, 255, "image", "4x4"},
                           {heat, 2, 2, 0, 0, 0, "a label far too long for its panel", NULL}};
    attn_cli_canvas cv;
    if (TU_STATUS(attn_cli_panels_render(ctx, p, 2, S, "title", &cv), ATTN_OK, ctx)) {
        TU_CHECK(cv.w == 2 * 12 + 2 * S + 12 && cv.h > S + 30 && cv.h < S + 100, "size %d x %d",
                 cv.w, cv.h);
        unsigned char hot[3], cold[3], white[3] = {255, 255, 255}, black[3] = {0, 0, 0};
        attn_cli_colormap(1, hot);
        attn_cli_colormap(0, cold);
        /* the heat panel's own range: one quarter each of the coldest and the hottest colour */
        TU_CHECK(count_colour(&cv, hot) == (size_t)(S / 2) * (S / 2), "hot %zu",
                 count_colour(&cv, hot));
        TU_CHECK(count_colour(&cv, cold) == (size_t)(S / 2) * (S / 2), "cold %zu",
                 count_colour(&cv, cold));
        /* the grey panel: 0 black, 255 white, a tenth of a panel each */
        TU_CHECK(count_colour(&cv, black) == (size_t)(S / 4) * (S / 4), "black %zu",
                 count_colour(&cv, black));
        TU_CHECK(count_colour(&cv, white) > (size_t)(S / 4) * (S / 4), "white");
        static const unsigned char text[3] = {34, 34, 34};
        TU_CHECK(count_colour(&cv, text) > 50, "labels drawn");
        attn__free(ctx, cv.px);
    }
    const char *path = "test_viz_panels.png";
    if (TU_STATUS(attn_cli_panels_png(ctx, path, p, 2, S, NULL), ATTN_OK, ctx)) {
        size_t n = 0;
        unsigned char *f = read_all(path, &n);
        int pw, ph, seen[5] = {0};
        unsigned char *px = f ? png_decode(f, n, &pw, &ph, seen) : NULL;
        TU_CHECK(px != NULL && pw == 2 * 12 + 2 * S + 12, "panels file is a valid PNG");
        free(px);
        free(f);
        remove(path);
    }
    TU_STATUS(attn_cli_panels_render(ctx, p, 0, S, NULL, &cv), ATTN_E_INVALID, ctx);
    TU_STATUS(attn_cli_panels_render(ctx, p, 2, 4, NULL, &cv), ATTN_E_INVALID, ctx);
    p[1].rows = 0;
    TU_STATUS(attn_cli_panels_render(ctx, p, 2, S, NULL, &cv), ATTN_E_INVALID, ctx);
    p[1].rows = 2;
    heat[3] = NAN;
    TU_STATUS(attn_cli_panels_render(ctx, p, 2, S, NULL, &cv), ATTN_E_NONFINITE, ctx);
    TU_STATUS(attn_cli_panels_png(ctx, "", p, 1, S, NULL), ATTN_E_INVALID, ctx);
}

/* ---- SVG ------------------------------------------------------------------------------- */
static int count_str(const char *s, const char *what) {
    int k = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) k++;
    return k;
}

/* one panel of a training run: "train" as a line, a validation series with markers */
static attn_status chart_svg(const double *x, const double *y, int n, const double *vx,
                             const double *vy, int nv, const char *vlabel, const char *title,
                             char **t, size_t *tn) {
    attn_cli_series s[2];
    int ns = 0;
    memset(s, 0, sizeof s);
    if (n > 0) s[ns++] = (attn_cli_series){"train", x, y, n, 0x1f77b4u, 1.6f, 0};
    if (nv > 0) s[ns++] = (attn_cli_series){vlabel, vx, vy, nv, 0xe6550du, 2.0f, 1};
    attn_cli_chart_panel panel = {"loss", NULL, NULL, s, ns, 0, 1, 6};
    attn_cli_chart chart = {title, "step", &panel, 1, 760, 340};
    return attn_cli_chart_svg_text(ctx, &chart, t, tn);
}

static void test_svg(void) {
    double s[200], l[200], vs[10], vl[10];
    for (int i = 0; i < 200; i++) s[i] = i * 10, l[i] = 4.0 * exp(-i / 40.0) + 0.1;
    for (int i = 0; i < 10; i++) vs[i] = i * 200 + 190, vl[i] = 4.0 * exp(-i * 0.5) + 0.2;
    char *t = NULL;
    size_t n = 0;
    if (TU_STATUS(chart_svg(s, l, 200, vs, vl, 10, "held-out <error>", "loss <dates> & \"co\"",
                            &t, &n),
                  ATTN_OK, ctx)) {
        TU_CHECK(strlen(t) == n, "svg length");
        TU_CHECK(strncmp(t, "<?xml", 5) == 0 && strstr(t, "<svg ") != NULL, "svg header");
        TU_CHECK(n > 7 && strcmp(t + n - 7, "</svg>\n") == 0, "svg end");
        TU_CHECK(strstr(t, "loss &lt;dates&gt; &amp; &quot;co&quot;") != NULL, "title escaped");
        TU_CHECK(count_str(t, "<polyline") == 2, "one line per series");
        TU_CHECK(count_str(t, "<circle") == 11, "validation markers (+1 in the legend)");
        TU_CHECK(count_str(t, "<text") == count_str(t, "</text>"), "text elements closed");
        TU_CHECK(strstr(t, ">train<") && strstr(t, ">held-out &lt;error&gt;<") && strstr(t, ">step<") &&
                     strstr(t, ">loss<"),
                 "legend and axis titles");
        TU_CHECK(strstr(t, "nan") == NULL && strstr(t, "inf") == NULL, "no non-finite numbers");
        attn__free(ctx, t);
    }
    /* a NaN breaks the line; no validation series; no title */
    l[100] = NAN;
    if (TU_STATUS(chart_svg(s, l, 200, NULL, NULL, 0, NULL, NULL, &t, &n), ATTN_OK, ctx)) {
        TU_CHECK(count_str(t, "<polyline") == 2 && count_str(t, "<circle") == 0,
                 "NaN splits the line");
        TU_CHECK(strstr(t, "nan") == NULL, "NaN not printed");
        attn__free(ctx, t);
    }
    /* one point, constant values */
    double one = 3.0;
    if (TU_STATUS(chart_svg(&one, &one, 1, NULL, NULL, 0, NULL, "x", &t, &n), ATTN_OK, ctx))
        attn__free(ctx, t);
    const char *path = "test_viz_loss.svg";
    attn_cli_series sr = {"train", s, l, 200, 0x1f77b4u, 1.6f, 0};
    attn_cli_chart_panel panel = {"loss", NULL, NULL, &sr, 1, 0, 1, 6};
    attn_cli_chart chart = {"loss", "step", &panel, 1, 0, 0};
    if (TU_STATUS(attn_cli_chart_write(ctx, path, 0, &chart), ATTN_OK, ctx)) {
        size_t fn = 0;
        unsigned char *f = read_all(path, &fn);
        TU_CHECK(f && fn > 1000 && memcmp(f, "<?xml", 5) == 0, "svg file written");
        free(f);
        remove(path);
    }
    TU_STATUS(attn_cli_chart_write(ctx, "no/such/dir/l.svg", 0, &chart), ATTN_E_IO, ctx);
}

int main(void) {
    if (attn_ctx_create(NULL, &ctx) != ATTN_OK) return 1;
    test_checksums();
    test_zlib();
    test_png();
    test_font_colormap();
    test_heatmap();
    test_panels();
    test_svg();
    attn_ctx_free(ctx);
    return tu_finish("test_viz");
}
