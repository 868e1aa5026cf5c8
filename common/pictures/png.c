/* PNG encoder with no dependency: CRC-32, Adler-32, a zlib stream with deflate (LZ77 with hash
 * chains + the fixed Huffman codes of RFC 1951 section 3.2.6, or stored blocks), per-row
 * adaptive PNG filters, chunk assembly and file output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draw.h"
#include "file.h"

/* ---- checksums ------------------------------------------------------------------------- */
/* Nibble table of the reflected polynomial 0xEDB88320: small, constant, thread-safe. */
static const uint32_t crc_nibble[16] = {
    0x00000000u, 0x1DB71064u, 0x3B6E20C8u, 0x26D930ACu, 0x76DC4190u, 0x6B6B51F4u,
    0x4DB26158u, 0x5005713Cu, 0xEDB88320u, 0xF00F9344u, 0xD6D6A3E8u, 0xCB61B38Cu,
    0x9B64C2B0u, 0x86D3D2D4u, 0xA00AE278u, 0xBDBDF21Cu};

uint32_t attn_cli_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc = crc_nibble[(crc ^ p[i]) & 15] ^ (crc >> 4);
        crc = crc_nibble[(crc ^ (p[i] >> 4)) & 15] ^ (crc >> 4);
    }
    return ~crc;
}

uint32_t attn_cli_adler32(uint32_t adler, const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t a = adler & 0xFFFF, b = adler >> 16;
    while (n > 0) {
        size_t k = n < 5552 ? n : 5552; /* largest run before b can overflow 32 bits */
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return (b << 16) | a;
}

/* ---- deflate --------------------------------------------------------------------------- */
static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,
                                      15, 17, 19, 23, 27, 31, 35, 43, 51,  59,
                                      67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,
                                       17,   25,   33,   49,   65,   97,    129,   193,
                                       257,  385,  513,  769,  1025, 1537,  2049,  3073,
                                       4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

typedef struct bitw {
    unsigned char *buf;
    size_t cap, pos;
    uint64_t bits;
    int nbits;
    int full; /* ran out of room: the caller falls back to stored blocks */
} bitw;

static void bw_put(bitw *w, uint32_t v, int n) {
    w->bits |= (uint64_t)v << w->nbits;
    w->nbits += n;
    while (w->nbits >= 8) {
        if (w->pos == w->cap) {
            w->full = 1;
            w->nbits = 0;
            return;
        }
        w->buf[w->pos++] = (unsigned char)w->bits;
        w->bits >>= 8;
        w->nbits -= 8;
    }
}
static void bw_flush(bitw *w) {
    if (w->nbits > 0) bw_put(w, 0, 8 - w->nbits);
}
/* Huffman codes go out most significant bit first. */
static void bw_code(bitw *w, uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; i++) r |= ((code >> i) & 1u) << (len - 1 - i);
    bw_put(w, r, len);
}
static void put_litlen(bitw *w, int sym) {
    if (sym < 144) bw_code(w, 0x30 + (uint32_t)sym, 8);
    else if (sym < 256) bw_code(w, 0x190 + (uint32_t)(sym - 144), 9);
    else if (sym < 280) bw_code(w, (uint32_t)(sym - 256), 7);
    else bw_code(w, 0xC0 + (uint32_t)(sym - 280), 8);
}
static void put_match(bitw *w, int len, int dist) {
    int li = 28;
    while (len_base[li] > len) li--;
    put_litlen(w, 257 + li);
    if (len_extra[li]) bw_put(w, (uint32_t)(len - len_base[li]), len_extra[li]);
    int di = 29;
    while (dist_base[di] > dist) di--;
    bw_code(w, (uint32_t)di, 5);
    if (dist_extra[di]) bw_put(w, (uint32_t)(dist - dist_base[di]), dist_extra[di]);
}

#define WSIZE 32768
#define WMASK (WSIZE - 1)
#define HBITS 15
#define MAX_CHAIN 96
#define MIN_MATCH 3
#define MAX_MATCH 258
/* Inputs longer than this are stored: positions are kept in 32 bits. */
#define LZ_MAX_INPUT ((size_t)1 << 30)

static uint32_t hash3(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    return (v * 2654435761u) >> (32 - HBITS);
}

/* One final fixed-Huffman block of in[0..n) into w; head/prev are scratch (positions + 1,
 * 0 = none).  Returns 0 if the output did not fit. */
static int deflate_fixed(const unsigned char *in, size_t n, bitw *w, uint32_t *head,
                         uint32_t *prev) {
    memset(head, 0, sizeof(uint32_t) << HBITS);
    bw_put(w, 1, 1); /* BFINAL */
    bw_put(w, 1, 2); /* BTYPE = 01, fixed codes */
    size_t i = 0;
    while (i < n && !w->full) {
        int best = 0;
        size_t best_d = 0;
        if (i + MIN_MATCH <= n) {
            uint32_t h = hash3(in + i);
            size_t maxl = n - i < MAX_MATCH ? n - i : MAX_MATCH;
            uint32_t cand = head[h];
            for (int chain = 0; cand && chain < MAX_CHAIN; chain++) {
                size_t p = cand - 1;
                if (p >= i || i - p > WSIZE) break;
                if (in[p + (size_t)best] == in[i + (size_t)best] && in[p] == in[i]) {
                    size_t l = 0;
                    while (l < maxl && in[p + l] == in[i + l]) l++;
                    if ((int)l > best) {
                        best = (int)l;
                        best_d = i - p;
                        if (l == maxl) break;
                    }
                }
                uint32_t nx = prev[p & WMASK];
                if (nx >= cand) break; /* stale slot */
                cand = nx;
            }
        }
        size_t adv = best >= MIN_MATCH ? (size_t)best : 1;
        if (best >= MIN_MATCH) put_match(w, best, (int)best_d);
        else put_litlen(w, in[i]);
        /* index every position covered, so repeated rows find each other */
        for (size_t k = 0; k < adv; k++, i++) {
            if (i + MIN_MATCH <= n) {
                uint32_t h = hash3(in + i);
                prev[i & WMASK] = head[h];
                head[h] = (uint32_t)(i + 1);
            }
        }
    }
    put_litlen(w, 256);
    bw_flush(w);
    return !w->full;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

attn_status attn_cli_zlib_compress(attn_ctx *ctx, const unsigned char *in, size_t n, int mode,
                                   unsigned char **out, size_t *out_n) {
    ATTN_FAIL_IF(!ctx || !out || !out_n || (!in && n), ctx, ATTN_E_INVALID,
                 "zlib: NULL argument");
    *out = NULL;
    *out_n = 0;
    ATTN_FAIL_IF(mode != ATTN_CLI_ZLIB_STORED && mode != ATTN_CLI_ZLIB_FIXED, ctx, ATTN_E_INVALID,
                 "zlib: unknown mode %d", mode);
    /* stored: header 2, then per block of <= 65535 bytes 5 bytes + data, then Adler-32 4 */
    size_t nblocks = n / 65535 + (n % 65535 != 0), total;
    if (nblocks == 0) nblocks = 1;
    if (!attn__mul_size(nblocks, 5, &total) || !attn__add_size(total, n, &total) ||
        !attn__add_size(total, 6, &total))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "zlib: %zu bytes overflow", n);
    unsigned char *buf = attn__malloc(ctx, total);
    if (!buf) return attn__fail(ctx, ATTN_E_NOMEM, "zlib: out of memory (%zu bytes)", total);
    buf[0] = 0x78; /* deflate, 32K window */
    buf[1] = 0x01; /* check bits: 0x7801 % 31 == 0 */
    size_t pos = 2;
    int done = 0;
    if (mode == ATTN_CLI_ZLIB_FIXED && n >= 16 && n <= LZ_MAX_INPUT) {
        uint32_t *head = attn__malloc(ctx, sizeof(uint32_t) << HBITS);
        uint32_t *prev = attn__malloc(ctx, sizeof(uint32_t) * WSIZE);
        if (head && prev) {
            bitw w = {buf + 2, total - 6, 0, 0, 0, 0};
            if (deflate_fixed(in, n, &w, head, prev)) {
                pos = 2 + w.pos;
                done = 1;
            }
        }
        attn__free(ctx, head);
        attn__free(ctx, prev);
        if (!head || !prev) {
            attn__free(ctx, buf);
            return attn__fail(ctx, ATTN_E_NOMEM, "zlib: out of memory");
        }
    }
    if (!done) {
        size_t off = 0;
        for (size_t b = 0; b < nblocks; b++) {
            size_t len = n - off < 65535 ? n - off : 65535;
            buf[pos++] = (unsigned char)(b + 1 == nblocks); /* BFINAL, BTYPE = 00 */
            buf[pos++] = (unsigned char)len;
            buf[pos++] = (unsigned char)(len >> 8);
            buf[pos++] = (unsigned char)~len;
            buf[pos++] = (unsigned char)(~len >> 8);
            if (len) memcpy(buf + pos, in + off, len);
            pos += len;
            off += len;
        }
    }
    put_be32(buf + pos, attn_cli_adler32(1, in, n));
    *out = buf;
    *out_n = pos + 4;
    return ATTN_OK;
}

/* ---- PNG ------------------------------------------------------------------------------- */
static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

/* Filters row y (stride bytes, 3 bytes per pixel) with filter type f into dst. */
static void filter_row(const unsigned char *cur, const unsigned char *up, size_t stride, int f,
                       unsigned char *dst) {
    for (size_t i = 0; i < stride; i++) {
        int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
        int pred = 0;
        switch (f) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: pred = paeth(a, b, c); break;
        default: break;
        }
        dst[i] = (unsigned char)(cur[i] - pred);
    }
}

static size_t put_chunk(unsigned char *p, const char *type, const unsigned char *data,
                        size_t n) {
    put_be32(p, (uint32_t)n);
    memcpy(p + 4, type, 4);
    if (n) memcpy(p + 8, data, n);
    put_be32(p + 8 + n, attn_cli_crc32(0, p + 4, n + 4));
    return n + 12;
}

#define IDAT_MAX ((size_t)1 << 24) /* bytes of zlib data per IDAT chunk */

attn_status attn_cli_png_encode(attn_ctx *ctx, int width, int height, const unsigned char *rgb,
                                int mode, unsigned char **out, size_t *out_n) {
    ATTN_FAIL_IF(!ctx || !out || !out_n, ctx, ATTN_E_INVALID, "png: NULL argument");
    *out = NULL;
    *out_n = 0;
    ATTN_FAIL_IF(!rgb, ctx, ATTN_E_INVALID, "png: pixel data is NULL");
    ATTN_FAIL_IF(width <= 0 || height <= 0 || width > ATTN_CLI_PNG_MAX_DIM ||
                     height > ATTN_CLI_PNG_MAX_DIM,
                 ctx, ATTN_E_INVALID, "png: image size %d x %d outside 1..%d", width, height,
                 ATTN_CLI_PNG_MAX_DIM);
    size_t stride, raw_n;
    if (!attn__mul_size((size_t)width, 3, &stride) ||
        !attn__mul_size(stride + 1, (size_t)height, &raw_n))
        return attn__fail(ctx, ATTN_E_OVERFLOW, "png: %d x %d image overflows", width, height);
    attn_status st = ATTN_OK;
    unsigned char *raw = attn__malloc(ctx, raw_n), *cand = attn__malloc(ctx, stride * 5);
    unsigned char *z = NULL, *png = NULL;
    size_t zn = 0;
    if (!raw || !cand) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "png: out of memory (%zu bytes)", raw_n);
        goto done;
    }
    for (int y = 0; y < height; y++) {
        const unsigned char *cur = rgb + (size_t)y * stride;
        const unsigned char *up = y ? cur - stride : NULL;
        int best = 0;
        unsigned long best_sum = (unsigned long)-1;
        for (int f = 0; f < 5; f++) {
            unsigned char *d = cand + (size_t)f * stride;
            filter_row(cur, up, stride, f, d);
            unsigned long s = 0;
            for (size_t i = 0; i < stride; i++) s += (unsigned long)abs((int)(signed char)d[i]);
            if (s < best_sum) {
                best_sum = s;
                best = f;
            }
        }
        unsigned char *row = raw + (size_t)y * (stride + 1);
        row[0] = (unsigned char)best;
        memcpy(row + 1, cand + (size_t)best * stride, stride);
    }
    ATTN_TRYG(attn_cli_zlib_compress(ctx, raw, raw_n, mode, &z, &zn));
    size_t nidat = zn / IDAT_MAX + (zn % IDAT_MAX != 0), total;
    /* signature 8, IHDR 25, IDAT chunks 12 + data, IEND 12 */
    if (!attn__mul_size(nidat, 12, &total) || !attn__add_size(total, zn + 45, &total)) {
        st = attn__fail(ctx, ATTN_E_OVERFLOW, "png: encoded size overflows");
        goto done;
    }
    png = attn__malloc(ctx, total);
    if (!png) {
        st = attn__fail(ctx, ATTN_E_NOMEM, "png: out of memory (%zu bytes)", total);
        goto done;
    }
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    memcpy(png, sig, 8);
    size_t pos = 8;
    unsigned char ihdr[13];
    put_be32(ihdr, (uint32_t)width);
    put_be32(ihdr + 4, (uint32_t)height);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type: truecolour */
    ihdr[10] = 0; /* compression: deflate */
    ihdr[11] = 0; /* filter method 0 */
    ihdr[12] = 0; /* no interlace */
    pos += put_chunk(png + pos, "IHDR", ihdr, 13);
    for (size_t off = 0; off < zn; off += IDAT_MAX) {
        size_t len = zn - off < IDAT_MAX ? zn - off : IDAT_MAX;
        pos += put_chunk(png + pos, "IDAT", z + off, len);
    }
    pos += put_chunk(png + pos, "IEND", NULL, 0);
    *out = png;
    *out_n = pos;
    png = NULL;
done:
    attn__free(ctx, raw);
    attn__free(ctx, cand);
    attn__free(ctx, z);
    attn__free(ctx, png);
    return st;
}

attn_status attn_cli_write_file(attn_ctx *ctx, const char *path, const void *data, size_t n) {
    attn__piece pc = {data, n};
    return attn__file_write(ctx, path, &pc, 1);
}

attn_status attn_cli_png_write(attn_ctx *ctx, const char *path, int width, int height,
                               const unsigned char *rgb) {
    if (!ctx) return ATTN_E_INVALID;
    ATTN_FAIL_IF(!path || !path[0], ctx, ATTN_E_INVALID, "png: output path is NULL or empty");
    unsigned char *png;
    size_t n;
    ATTN_TRY(attn_cli_png_encode(ctx, width, height, rgb, ATTN_CLI_ZLIB_FIXED, &png, &n));
    attn_status st = attn_cli_write_file(ctx, path, png, n);
    attn__free(ctx, png);
    return st;
}
